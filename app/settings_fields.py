"""Every server setting: its type, bounds, default and description (the reference pages, the
TOML example and the chart's values schema are generated from them). `Settings`
(app/settings.py) reads them and checks them together."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, NoDecode

from app.paths import PROJECT_ROOT
from app.settings_limits import LimitFields

StringList = Annotated[list[str], NoDecode]
"""A list setting read as text, not JSON (`Settings` splits it at its separator)."""


def string_list(description: str) -> list[str]:
    """An empty-by-default list setting."""
    return Field(default_factory=list, description=description)


class SettingsFields(LimitFields, BaseSettings):
    """The settings, each with what it means; how they are read and checked: `Settings`."""

    host: str = Field("0.0.0.0", description="Address of the HTTP port (Triton's --http-address).")
    port: int = Field(
        8000, ge=0, le=65535, description="The HTTP port (Triton's --http-port); 0: any free port."
    )
    allow_http: bool = Field(
        True, description="Serve HTTP (Triton's --allow-http); false: gRPC only."
    )
    model_repository: Annotated[list[Path], NoDecode] = Field(
        default_factory=lambda: [PROJECT_ROOT / "configs" / "model_repository"],
        min_length=1,
        description="Triton model repository folders: one path, or a JSON list of several; a model "
        "whose folder is in two of them is UNAVAILABLE, as in Triton.",
    )
    models: list[str] = Field(
        default_factory=list,
        description="Models of the repository this server knows; empty means all.",
    )
    model_control_mode: Literal["none", "explicit", "poll"] = Field(
        "none",
        description="Triton's model control: 'none' loads every model at start and refuses load "
        "and unload; 'explicit' loads the --load-model ones and takes load/unload requests; "
        "'poll' follows the repository folder (models added, changed, removed).",
    )
    load_model: list[str] = Field(
        default_factory=list,
        description="With model_control_mode 'explicit': the models to load at start "
        "('*' alone: all).",
    )
    model_config_name: str = Field(
        "",
        pattern=r"^[^\s/\\]*$",
        description="Triton's --model-config-name: each model is configured from "
        "configs/<name>.pbtxt in its folder where it has one, else from its config.pbtxt; "
        "empty: config.pbtxt. A name without spaces or path separators.",
    )
    repository_poll_secs: float = Field(
        15,
        gt=0,
        description="With model_control_mode 'poll': seconds between two looks at the repository.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Least severe level logged; 'debug' is Triton's --log-verbose=1."
    )
    log_verbose: int = Field(
        0, ge=0, description="Triton's --log-verbose: >= 1 logs debug messages too."
    )
    log_info: bool = Field(True, description="Log info messages (Triton's --log-info).")
    log_warning: bool = Field(True, description="Log warnings (Triton's --log-warning).")
    log_error: bool = Field(True, description="Log errors (Triton's --log-error).")
    cpu_kvcache_space_gib: int = Field(
        2, ge=1, description="KV cache size for CPU engines (VLLM_CPU_KVCACHE_SPACE)."
    )
    drain_timeout_seconds: float = Field(
        30,
        ge=0,
        description="How long running requests may finish on unload or shutdown (Triton's "
        "--exit-timeout-secs); the rest are aborted.",
    )
    shutdown_grace_seconds: float = Field(
        8,
        ge=0,
        description="After the drain timeout, how long the rest of a stop (engines stopping) "
        "may take: past it the server kills the processes it started and exits 1, whatever "
        "its engines are doing (hung, loading, restarting).",
    )
    exit_on_error: bool = Field(
        True,
        description="Exit when a model fails to load at start (Triton's --exit-on-error); "
        "false: serve the others, the failed ones UNAVAILABLE.",
    )
    strict_readiness: bool = Field(
        True,
        description="Readiness needs every model ready (Triton's --strict-readiness); false: "
        "ready once the server answers.",
    )
    backend_config: StringList = string_list(
        "Triton's --backend-config=<backend>,<setting>=<value>: "
        "accepted for launch-line "
        "compatibility; no backend setting changes this server (each is logged at start).",
    )
    report_custom_metrics: bool = Field(
        False,
        description="Report vllm: metrics for every model, not only REPORT_CUSTOM_METRICS ones.",
    )
    metrics_port: int = Field(
        8002,
        ge=0,
        le=65535,
        description="Triton's metrics port (--metrics-port): GET /metrics there as well as on the "
        "HTTP port; 0: only on the HTTP port.",
    )
    metrics_address: str | None = Field(
        None, description="Address of the metrics port (Triton's --metrics-address); default: HOST."
    )
    allow_metrics: bool = Field(True, description="Serve metrics (Triton's --allow-metrics).")
    allow_gpu_metrics: bool = Field(
        True, description="Report GPU gauges (Triton's --allow-gpu-metrics)."
    )
    allow_cpu_metrics: bool = Field(
        True, description="Report CPU gauges (Triton's --allow-cpu-metrics)."
    )
    metrics_config: StringList = string_list(
        "Triton's --metrics-config=<setting>=<value> (e.g. summary_latencies=true).",
    )
    metrics_interval_ms: float = Field(
        2000,
        gt=0,
        description="How often GPU and CPU gauges are sampled (Triton's --metrics-interval-ms).",
    )
    trace_config: StringList = string_list(
        "Triton's --trace-config=[<mode>,]<setting>=<value> (e.g. mode=opentelemetry, "
        "opentelemetry,url=http://collector:4318/v1/traces).",
    )
    log_format: Literal["default", "ISO8601", "text", "json"] = Field(
        "default",
        description="Triton's line formats 'default' "
        "(I0520 20:03:25.829575 <pid> <file>:<line>] ...) "
        "and 'ISO8601' (2024-05-20T20:03:26Z I <pid> ...), "
        "'text' (time, level, logger) or 'json' lines.",
    )
    log_prompts: bool = Field(False, description="Include prompt text in access logs.")
    sse_ping_seconds: int = Field(15, ge=1, description="Interval of SSE keep-alive comments.")
    api_keys: StringList = string_list("Bearer keys; empty means no authentication.")
    http_restricted_api: StringList = string_list(
        "Triton's restricted API groups on HTTP: '<groups>:<header>=<value>' (several "
        "separated by ';'); a request to a group without the header is refused 403.",
    )
    grpc_restricted_protocol: StringList = string_list(
        "Triton's restricted protocol groups on gRPC: '<groups>:<key>=<value>' "
        "(several separated by ';'); calls need the metadata "
        "'triton-grpc-protocol-<key>: <value>'.",
    )
    load_override_max_files: int = Field(
        64, ge=0, description="Most 'file:' overrides one load request may carry."
    )
    max_override_bytes: int = Field(
        64 * 1024 * 1024, ge=0, description="Total bytes of one load request's 'file:' overrides."
    )
    grpc_use_ssl: bool = Field(
        False, description="Serve gRPC over TLS (grpc_server_cert and grpc_server_key)."
    )
    grpc_use_ssl_mutual: bool = Field(
        False,
        description="gRPC mutual TLS (implies grpc_use_ssl): clients must present a certificate "
        "signed by grpc_root_cert.",
    )
    grpc_server_cert: Path | None = Field(
        None, description="PEM certificate chain of the gRPC server."
    )
    grpc_server_key: Path | None = Field(None, description="PEM private key of the gRPC server.")
    grpc_root_cert: Path | None = Field(
        None, description="PEM CA certificates that sign gRPC clients' certificates."
    )
    http_ssl_certfile: Path | None = Field(
        None, description="Serve HTTP over TLS with this PEM certificate chain."
    )
    http_ssl_keyfile: Path | None = Field(
        None, description="PEM private key of the HTTP server's certificate."
    )
    http_ssl_ca_certs: Path | None = Field(
        None,
        description="PEM CA certificates: when set, "
        "HTTP clients must present a certificate signed by one.",
    )
    allowed_hosts: StringList = string_list(
        "Names of this server that a browser may reach it by (comma-separated; "
        "'.example.com' takes its subdomains too, '*' any name), beside IP addresses, "
        "localhost and the host's own name. Browser requests to another Host are refused 403 "
        "(DNS rebinding); other clients are not affected.",
    )
    engine_restart: bool = Field(
        True, description="Replace a failed engine (restarts with exponential backoff)."
    )
    engine_restart_max: int = Field(
        5,
        ge=0,
        description="Restarts allowed per engine (each instance of a model version) within the "
        "window; then live fails.",
    )
    engine_restart_window_seconds: float = Field(
        600, gt=0, description="The window ENGINE_RESTART_MAX counts restarts in."
    )
    engine_restart_backoff_seconds: float = Field(
        1,
        ge=0,
        description="Wait before the first restart in the window; doubled for each further one.",
    )
    engine_restart_backoff_max_seconds: float = Field(
        60, ge=0, description="Longest wait before a restart."
    )
    engine_probe_interval_seconds: float = Field(
        10, ge=0, description="How often each engine is asked for a round trip (0: never)."
    )
    engine_probe_timeout_seconds: float = Field(
        30, gt=0, description="An idle engine that does not answer a probe within this is hung."
    )
    engine_stall_seconds: float = Field(
        300,
        gt=0,
        description="A busy engine that leaves probes unanswered and has not stepped for this "
        "long is hung (a slow step is not a failure).",
    )
    engine_migrate_requests: bool = Field(
        True, description="Requests running on a failed engine resume on its replacement."
    )
    engine_migration_wait_seconds: float = Field(
        300,
        gt=0,
        description="How long a request waits for the replacement engine before it fails.",
    )
    allow_instance_pin: bool = Field(
        False,
        description="For tests: a request may choose which instance of its model serves it, by "
        "the header (or gRPC metadata) 'x-triton-instance: <index>'.",
    )
    max_instances_per_model: int = Field(
        64,
        ge=1,
        description="Most instances (engines) config.pbtxt's instance_group may give one model "
        "version; a model asking for more fails to load, naming the group.",
    )
    reload_in_place: bool = Field(
        False,
        description="A reload stops the old engines before starting the new ones (when there "
        "is no room for both, e.g. a GPU); by default the old ones serve until the new are ready.",
    )
    freeze_gc_heap: bool = Field(
        True,
        description="Freeze the heap after start-up and after each model load or unload "
        "(gc.freeze, as vLLM's API server does): Python's full collections then skip torch's "
        "and vLLM's objects.",
    )
    auth_open_health: bool = Field(True, description="Health routes answer without a key.")
    auth_open_metrics: bool = Field(True, description="/metrics answers without a key.")
    cors_allow_origins: StringList = string_list(
        "Web origins allowed to call the API from a browser (comma-separated).",
    )
    vllm_allow_runtime_lora_updating: bool = Field(
        False,
        description="vLLM's runtime LoRA routes POST /v1/load_lora_adapter "
        "and /v1/unload_lora_adapter "
        "(adapter folders inside the model repositories; with one frontend process).",
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster that models with distributed_executor_backend 'ray' join "
        "(RAY_ADDRESS, e.g. 10.0.0.5:6379); unset: vLLM starts Ray on this node.",
    )
    grpc_port: int = Field(
        8001, ge=0, le=65535, description="Triton's gRPC protocol on this port; 0 disables it."
    )
    grpc_address: str | None = Field(
        None, description="Address of the gRPC port (Triton's --grpc-address); default: HOST."
    )
    allow_grpc: bool = Field(
        True, description="Serve Triton's gRPC protocol (Triton's --allow-grpc)."
    )
    grpc_max_receive_message_bytes: int | None = Field(
        None, ge=1024, description="Largest gRPC request message; default MAX_REQUEST_BODY_BYTES."
    )
    grpc_max_send_message_bytes: int = Field(
        2**31 - 1, ge=1024, description="Largest gRPC response message."
    )
    grpc_keepalive_time_ms: int = Field(
        7_200_000, ge=1, description="Interval of the server's keepalive pings."
    )
    grpc_keepalive_timeout_ms: int = Field(
        20_000, ge=1, description="Wait for a ping's answer before closing."
    )
    grpc_keepalive_permit_without_calls: bool = Field(
        False, description="Ping connections that have no call."
    )
    grpc_http2_max_pings_without_data: int = Field(
        2, ge=0, description="Pings sent with no data in between."
    )
    grpc_http2_min_recv_ping_interval_without_data_ms: int = Field(
        300_000,
        ge=0,
        description="Shortest interval of client pings without data that is not a strike.",
    )
    grpc_http2_max_ping_strikes: int = Field(
        2, ge=0, description="Strikes before the connection is closed."
    )
    grpc_max_connection_idle_seconds: float = Field(
        300,
        gt=0,
        description="A gRPC connection without a call for this long is closed (a GOAWAY: "
        "clients connect again for their next call).",
    )
    grpc_reuse_port: bool = Field(
        False, description="SO_REUSEPORT: several processes share GRPC_PORT."
    )
    frontend_processes: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Processes serving HTTP, gRPC and OpenAI, sharing each model's engine core; "
        "default: 1 without a GPU or with fewer than 8 cores, "
        "else a quarter of the cores (at most 8).",
    )
