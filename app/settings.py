"""Server settings: environment variables, an optional TOML file, then defaults."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from app.paths import PROJECT_ROOT

DEFAULT_SETTINGS_FILE = PROJECT_ROOT / "configs" / "server.toml"


class Settings(BaseSettings):
    """Everything the server reads at start-up.

    Each field can be set by an environment variable of the same name in upper case
    (`HOST`, `PORT`, `MODEL_REPOSITORY`, ...) or in the TOML file named by
    `SETTINGS_FILE` (default `configs/server.toml`, optional).
    """

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    host: str = "0.0.0.0"
    port: int = Field(8000, ge=0, le=65535)
    model_repository: Path = PROJECT_ROOT / "configs" / "model_repository"
    models: list[str] = Field(
        default_factory=list,
        description="Models of the repository to load at start-up; empty means all.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    cpu_kvcache_space_gib: int = Field(
        2, ge=1, description="KV cache size for CPU engines (VLLM_CPU_KVCACHE_SPACE)."
    )
    drain_timeout_seconds: float = Field(
        30, ge=0, description="How long running requests may finish on unload or shutdown."
    )
    report_custom_metrics: bool = Field(
        False, description="Report vllm: metrics for every model, not only REPORT_CUSTOM_METRICS ones."
    )
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="Also serve /metrics on this port (Triton uses 8002)."
    )
    log_format: Literal["text", "json"] = "text"
    log_prompts: bool = Field(False, description="Include prompt text in access logs.")
    sse_ping_seconds: int = Field(15, ge=1, description="Interval of SSE keep-alive comments.")
    max_pending_requests: int | None = Field(
        None, ge=1, description="Per model: requests admitted (running + queued) before 503."
    )
    max_request_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_tokens_limit: int | None = Field(None, ge=1, description="Largest max_tokens a request may ask.")
    max_n: int = Field(16, ge=1, description="Largest n a request may ask.")
    request_timeout_seconds: float | None = Field(
        None, gt=0, description="Abort requests running longer than this."
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Bearer keys; empty means no authentication."
    )
    engine_restart: bool = Field(
        True, description="Replace a failed engine (restarts with exponential backoff)."
    )
    engine_restart_max: int = Field(
        5, ge=0, description="Restarts allowed per model version within the window; then live fails."
    )
    engine_restart_window_seconds: float = Field(600, gt=0)
    engine_restart_backoff_seconds: float = Field(
        1, ge=0, description="Wait before the first restart in the window; doubled for each further one."
    )
    engine_restart_backoff_max_seconds: float = Field(60, ge=0)
    engine_probe_interval_seconds: float = Field(
        10, ge=0, description="How often each engine must answer a round trip (0: never)."
    )
    engine_probe_timeout_seconds: float = Field(30, gt=0)
    reload_in_place: bool = Field(
        False,
        description="A reload stops the old engines before starting the new ones (when there "
        "is no room for both, e.g. a GPU); by default the old ones serve until the new are ready.",
    )
    freeze_gc_heap: bool = Field(
        True,
        description="Freeze the heap after start-up and after each model load or unload (gc.freeze, "
        "as vLLM's API server does): Python's full collections then skip torch's and vLLM's objects.",
    )
    auth_open_health: bool = Field(True, description="Health routes answer without a key.")
    auth_open_metrics: bool = Field(True, description="/metrics answers without a key.")
    cors_allow_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    ray_address: str | None = Field(
        None,
        description="Ray cluster that models with distributed_executor_backend 'ray' join "
        "(RAY_ADDRESS, e.g. 10.0.0.5:6379); unset: vLLM starts Ray on this node.",
    )
    grpc_port: int = Field(8001, ge=0, le=65535, description="Triton's gRPC protocol on this port; 0 disables it.")
    grpc_max_receive_message_bytes: int | None = Field(
        None, ge=1024, description="Largest gRPC request message; default MAX_REQUEST_BODY_BYTES."
    )
    grpc_max_send_message_bytes: int = Field(2**31 - 1, ge=1024, description="Largest gRPC response message.")
    grpc_keepalive_time_ms: int = Field(7_200_000, ge=1, description="Interval of the server's keepalive pings.")
    grpc_keepalive_timeout_ms: int = Field(20_000, ge=1, description="Wait for a ping's answer before closing.")
    grpc_keepalive_permit_without_calls: bool = Field(False, description="Ping connections that have no call.")
    grpc_http2_max_pings_without_data: int = Field(2, ge=0, description="Pings sent with no data in between.")
    grpc_http2_min_recv_ping_interval_without_data_ms: int = Field(
        300_000, ge=0, description="Shortest interval of client pings without data that is not a strike."
    )
    grpc_http2_max_ping_strikes: int = Field(2, ge=0, description="Strikes before the connection is closed.")
    grpc_reuse_port: bool = Field(False, description="SO_REUSEPORT: several processes share GRPC_PORT.")
    frontend_processes: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Processes serving HTTP, gRPC and OpenAI, sharing each model's engine core; "
        "default: 1 without a GPU or with fewer than 8 cores, else a quarter of the cores (at most 8).",
    )

    def frontend_process_count(self) -> int:
        """FRONTEND_PROCESSES, or the default for this machine's cores and GPUs."""
        if self.frontend_processes is not None:
            return self.frontend_processes
        cores = len(os.sched_getaffinity(0))
        has_gpu = bool(glob.glob("/dev/nvidia[0-9]*")) and os.environ.get("CUDA_VISIBLE_DEVICES") != ""
        return min(cores // 4, 8) if has_gpu and cores >= 8 else 1

    @field_validator("api_keys", "cors_allow_origins", mode="before")
    @classmethod
    def split_commas(cls, value: object) -> object:
        """`API_KEYS=a,b` as well as a list (from TOML or code)."""
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = Path(os.environ.get("SETTINGS_FILE", DEFAULT_SETTINGS_FILE))
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=toml_file),
        )
