"""The server's metadata as KServe v2 reports it on every protocol: name, version, extensions."""

from __future__ import annotations

from typing import Any

import app as package

SERVER_NAME = "triton-vllm-generate"
EXTENSIONS = [
    "model_repository",
    "model_configuration",
    "generate",
    "statistics",
    "trace",
    "logging",
]
"""Triton's extension names this server implements (`generate` on HTTP only, as in Triton)."""


def server_metadata() -> dict[str, Any]:
    return {"name": SERVER_NAME, "version": package.__version__, "extensions": list(EXTENSIONS)}
