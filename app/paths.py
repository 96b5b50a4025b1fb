"""Where the project lives: relative paths in model.json are also looked up from here."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
