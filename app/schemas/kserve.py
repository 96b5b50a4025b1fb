"""KServe v2 (Triton) bodies of the health, metadata and repository routes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ServerMetadata(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "triton-vllm-generate",
                    "version": "0.1.0",
                    "extensions": [
                        "model_repository",
                        "model_configuration",
                        "generate",
                        "statistics",
                        "logging",
                    ],
                }
            ]
        }
    )

    name: str
    version: str
    extensions: list[str]


class TensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "smollm2",
                    "versions": ["1"],
                    "platform": "vllm",
                    "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1]}],
                    "outputs": [{"name": "text_output", "datatype": "BYTES", "shape": [-1]}],
                }
            ]
        }
    )

    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class RepositoryIndexRequest(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [{"ready": True}]})

    ready: bool | None = None


class RepositoryIndexEntry(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"name": "smollm2", "version": "1", "state": "READY"}]}
    )

    name: str
    version: str | None = None
    state: str | None = None
    reason: str | None = None


class ModelControlRequest(BaseModel):
    """Body of load/unload. Load takes Triton's overrides in `parameters`: `config` (the
    model configuration as a JSON string) and `file:<version>/<name>` (base64 contents)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "parameters": {
                        "config": '{"backend": "vllm", '
                        '"parameters": {"REPORT_CUSTOM_METRICS": {"string_value": "true"}}}'
                    }
                }
            ]
        },
    )

    parameters: dict[str, Any] | None = None
