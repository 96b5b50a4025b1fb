"""Model repositories written by the tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_model(
    root: Path, name: str, version: str = "1", config: str | None = None, **engine_args: object
) -> Path:
    """Add one model version to a repository folder."""
    version_dir = root / name / version
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / "model.json").write_text(json.dumps(engine_args or {"model": "fake-model"}))
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)
    return version_dir


EXPLICIT_CONTROL: dict[str, Any] = {"model_control_mode": "explicit", "load_model": ["*"]}
"""Settings of Triton's explicit model control (every model loaded at start): load and
unload requests are taken."""
