"""The settings as the plain options each part takes: nothing below the frontends reads
settings (docs/architecture.md); the composition root (app/main.py) hands these over."""

from __future__ import annotations

from app.core.limits import RequestLimits
from app.engine.engine_options import EngineOptions
from app.engine.worker_pool import WorkerOptions
from app.grpc.server import GrpcOptions, GrpcTls
from app.observability.log_control import LogSettings
from app.repository.overrides import OverrideLimits
from app.repository.registry import LifecycleOptions, ModelControl
from app.repository.supervision import RestartPolicy
from app.runtime import ServingOptions
from app.settings import Settings


def lifecycle_options(settings: Settings) -> LifecycleOptions:
    """The registry's: model control, load overrides, drain, admission, engine restarts."""
    restart = RestartPolicy(
        enabled=settings.engine_restart,
        max_restarts=settings.engine_restart_max,
        window_seconds=settings.engine_restart_window_seconds,
        backoff_seconds=settings.engine_restart_backoff_seconds,
        max_backoff_seconds=settings.engine_restart_backoff_max_seconds,
        probe_interval_seconds=settings.engine_probe_interval_seconds,
        probe_timeout_seconds=settings.engine_probe_timeout_seconds,
        stall_seconds=settings.engine_stall_seconds,
        migrate_requests=settings.engine_migrate_requests,
        migration_wait_seconds=settings.engine_migration_wait_seconds,
    )
    return LifecycleOptions(
        model_control=ModelControl(settings.model_control_mode),
        override_limits=OverrideLimits(
            settings.load_override_max_files, settings.max_override_bytes
        ),
        drain_timeout=settings.drain_timeout_seconds,
        max_pending=settings.max_pending_requests,
        restart=restart,
        reload_in_place=settings.reload_in_place,
        exit_on_error=settings.exit_on_error,
        strict_readiness=settings.strict_readiness,
        allow_instance_pin=settings.allow_instance_pin,
        max_instances=settings.max_instances_per_model,
        config_name=settings.model_config_name or None,
    )


def request_limits(settings: Settings) -> RequestLimits:
    """The generation service's bounds on one request."""
    return RequestLimits(
        max_tokens=settings.max_tokens_limit,
        max_n=settings.max_n,
        max_stop=settings.max_stop,
        max_stop_bytes=settings.max_stop_bytes,
        max_grammar_bytes=settings.max_grammar_bytes,
        max_token_ids=settings.max_token_ids,
        max_images=settings.max_images,
        max_image_pixels=settings.max_image_pixels,
        max_prompts=settings.max_prompts,
        max_messages=settings.max_messages,
        max_content_parts=settings.max_content_parts,
        max_tools=settings.max_tools,
        max_repetition_pattern=settings.max_repetition_pattern,
        max_logprob_entries=settings.max_logprob_entries,
        max_beam_search_positions=settings.max_beam_search_positions,
    )


def engine_options(settings: Settings) -> EngineOptions:
    """The vLLM engines': KV cache on CPU hosts, `vllm:` metrics, Ray, their grammar workers
    (how many, their memory bound, the compile deadline) and the images of media URLs."""
    return EngineOptions(
        cpu_kvcache_space_gib=settings.cpu_kvcache_space_gib,
        report_all_metrics=settings.report_custom_metrics,
        ray_address=settings.ray_address,
        grammar_workers=WorkerOptions(
            workers=settings.grammar_workers,
            memory_mb=settings.grammar_worker_memory_mb,
            job_seconds=settings.grammar_compile_timeout_seconds,
        ),
        max_image_pixels=settings.max_image_pixels,
    )


def serving_options(settings: Settings) -> ServingOptions:
    """What runs around serving: the metrics port, the heap freeze, Triton's poll mode."""
    poll = settings.model_control_mode == "poll"
    return ServingOptions(
        metrics_address=settings.metrics_address or settings.host,
        metrics_port=settings.metrics_port if settings.allow_metrics else 0,
        freeze_heap=settings.freeze_gc_heap,
        poll_seconds=settings.repository_poll_secs if poll else None,
        poll_models=settings.models or None,
    )


def log_settings(settings: Settings) -> LogSettings:
    """LOG_LEVEL and Triton's --log-verbose, --log-info, --log-warning, --log-error and
    --log-format (changed later by the logging extension)."""
    switches = (settings.log_verbose, settings.log_info, settings.log_warning, settings.log_error)
    return LogSettings.of(settings.log_level, settings.log_format, *switches)


def startup_models(settings: Settings) -> list[str] | None:
    """The models loaded at start (None: every one): MODELS, or in explicit mode only the
    --load-model ones ('*': every one)."""
    if settings.model_control_mode == "explicit" and settings.load_model != ["*"]:
        return list(settings.load_model)
    return settings.models or None


def grpc_options(settings: Settings) -> GrpcOptions:
    """Triton's gRPC frontend: its address, keys, limits, keepalive and TLS."""
    ping_interval = settings.grpc_http2_min_recv_ping_interval_without_data_ms
    return GrpcOptions(
        host=settings.grpc_address or settings.host,
        port=settings.grpc_port,
        api_keys=tuple(settings.api_keys),
        open_health=settings.auth_open_health,
        restrictions=settings.grpc_restrictions(),
        log_prompts=settings.log_prompts,
        max_receive_message_bytes=settings.grpc_max_receive_message_bytes
        or settings.max_request_body_bytes,
        max_send_message_bytes=settings.grpc_max_send_message_bytes,
        keepalive_time_ms=settings.grpc_keepalive_time_ms,
        keepalive_timeout_ms=settings.grpc_keepalive_timeout_ms,
        keepalive_permit_without_calls=settings.grpc_keepalive_permit_without_calls,
        http2_max_pings_without_data=settings.grpc_http2_max_pings_without_data,
        http2_min_recv_ping_interval_without_data_ms=ping_interval,
        http2_max_ping_strikes=settings.grpc_http2_max_ping_strikes,
        max_connections=settings.max_grpc_connections,
        max_calls=settings.max_grpc_calls,
        max_connection_idle_ms=round(settings.grpc_max_connection_idle_seconds * 1000),
        handshake_timeout_ms=round(settings.http_header_timeout_seconds * 1000),
        reuse_port=settings.grpc_reuse_port,
        tls=grpc_tls(settings),
    )


def grpc_tls(settings: Settings) -> GrpcTls | None:
    """The gRPC port's TLS (None: plain), mutual when --grpc-use-ssl-mutual is on."""
    if not (settings.grpc_use_ssl or settings.grpc_use_ssl_mutual):
        return None
    if settings.grpc_server_cert is None or settings.grpc_server_key is None:
        return None
    return GrpcTls(
        settings.grpc_server_cert,
        settings.grpc_server_key,
        settings.grpc_root_cert,
        settings.grpc_use_ssl_mutual,
    )
