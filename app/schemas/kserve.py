"""KServe v2 (Triton) bodies of the health, metadata and repository routes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class RepositoryIndexRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    ready: bool | None = None


class RepositoryIndexEntry(BaseModel):
    name: str
    version: str | None = None
    state: str | None = None
    reason: str | None = None


class ModelControlRequest(BaseModel):
    """Body of load/unload; Triton's `parameters` (config overrides, files) are not supported."""

    model_config = ConfigDict(extra="allow")

    parameters: dict[str, Any] | None = None
