"""Triton's flags of its GRPC, Metrics and Tracing groups, then of its last two (Backend, and
Other: caches, memory pools, and the deprecated trace flags), each set onto a setting of ours or
accepted without effect (src/command_line_parser.cc)."""

from __future__ import annotations

from app.cli.flags import Kind, ignored, setting
from app.cli.serving_flags import RESTRICTED_GROUPS
from app.cli.values import (
    backend_config,
    cache_config,
    deprecated_trace,
    grpc_compression_level,
    grpc_restriction,
    grpc_thread_count,
    metrics_config,
    positive,
    trace_config,
)

NO_RESPONSE_CACHE = (
    "Triton's response cache does not apply to decoupled models, which every vLLM model is."
)

GRPC = [
    setting("allow-grpc", Kind.BOOL, "allow_grpc", "Allow the server to listen for GRPC requests."),
    setting(
        "grpc-address",
        Kind.STRING,
        "grpc_address",
        "The address for the grpc server to binds to. Default is 0.0.0.0",
    ),
    setting(
        "grpc-port",
        Kind.INT,
        "grpc_port",
        "The port for the server to listen on for GRPC requests. Default is 8001.",
    ),
    setting(
        "reuse-grpc-port",
        Kind.BOOL,
        "grpc_reuse_port",
        "Allow multiple servers to listen on the same GRPC port when every server has this "
        "option set.",
    ),
    ignored(
        "grpc-header-forward-pattern",
        Kind.STRING,
        "The regular expression pattern that will be used for forwarding GRPC headers as "
        "inference request parameters.",
        note="Headers are not forwarded as request parameters.",
    ),
    ignored(
        "grpc-infer-thread-count",
        Kind.INT,
        "The number of gRPC inference handler threads. Default is 2.",
        convert=grpc_thread_count,
    ),
    ignored(
        "grpc-infer-allocation-pool-size",
        Kind.INT,
        "The maximum number of states (inference request/response queues) that remain allocated "
        "for reuse.",
    ),
    ignored(
        "grpc-max-response-pool-size",
        Kind.INT,
        "The maximum number of inference response objects that can remain allocated in the "
        "response queue at any given time.",
        convert=positive("--grpc-max-response-pool-size"),
    ),
    setting(
        "grpc-use-ssl",
        Kind.BOOL,
        "grpc_use_ssl",
        "Use SSL authentication for GRPC requests. Default is false.",
    ),
    setting(
        "grpc-use-ssl-mutual",
        Kind.BOOL,
        "grpc_use_ssl_mutual",
        "Use mututal SSL authentication for GRPC requests. This option will preempt "
        "'--grpc-use-ssl' if it is also specified. Default is false.",
        also={"grpc_use_ssl": True},
    ),
    setting(
        "grpc-server-cert",
        Kind.STRING,
        "grpc_server_cert",
        "File holding PEM-encoded server certificate. Ignored unless --grpc-use-ssl is true.",
    ),
    setting(
        "grpc-server-key",
        Kind.STRING,
        "grpc_server_key",
        "File holding PEM-encoded server key. Ignored unless --grpc-use-ssl is true.",
    ),
    setting(
        "grpc-root-cert",
        Kind.STRING,
        "grpc_root_cert",
        "File holding PEM-encoded root certificate. Ignore unless --grpc-use-ssl is false.",
    ),
    ignored(
        "grpc-infer-response-compression-level",
        Kind.STRING,
        "The compression level to be used while returning the infer response to the peer. Allowed "
        "values are none, low, medium and high. By default, compression level is selected as none.",
        convert=grpc_compression_level,
    ),
    setting(
        "grpc-keepalive-time",
        Kind.INT,
        "grpc_keepalive_time_ms",
        "The period (in milliseconds) after which a keepalive ping is sent on the transport. "
        "Default is 7200000 (2 hours).",
    ),
    setting(
        "grpc-keepalive-timeout",
        Kind.INT,
        "grpc_keepalive_timeout_ms",
        "The period (in milliseconds) the sender of the keepalive ping waits for an "
        "acknowledgement. "
        "If it does not receive an acknowledgment within this time, it will close the connection. "
        "Default is 20000 (20 seconds).",
    ),
    setting(
        "grpc-keepalive-permit-without-calls",
        Kind.BOOL,
        "grpc_keepalive_permit_without_calls",
        "Allows keepalive pings to be sent even if there are no calls in flight (0 : false; "
        "1 : true). Default is 0 (false).",
    ),
    setting(
        "grpc-http2-max-pings-without-data",
        Kind.INT,
        "grpc_http2_max_pings_without_data",
        "The maximum number of pings that can be sent when there is no data/header frame to be "
        "sent. Setting it to 0 allows sending pings without such a restriction. Default is 2.",
    ),
    setting(
        "grpc-http2-min-recv-ping-interval-without-data",
        Kind.INT,
        "grpc_http2_min_recv_ping_interval_without_data_ms",
        "If there are no data/header frames being sent on the transport, the minimum time (in "
        "milliseconds) expected between receiving successive pings; a ping sooner is a 'ping "
        "strike'. Default is 300000 (5 minutes).",
    ),
    setting(
        "grpc-http2-max-ping-strikes",
        Kind.INT,
        "grpc_http2_max_ping_strikes",
        "Maximum number of bad pings that the server will tolerate before sending an HTTP2 GOAWAY "
        "frame and closing the transport. Setting it to 0 allows the server to accept any number "
        "of bad pings. Default is 2.",
    ),
    ignored(
        "grpc-max-connection-age",
        Kind.INT,
        "Maximum time that a channel may exist in milliseconds. Default is undefined.",
    ),
    ignored(
        "grpc-max-connection-age-grace",
        Kind.INT,
        "Grace period after the channel reaches its max age. Default is undefined.",
    ),
    setting(
        "grpc-restricted-protocol",
        Kind.STRING,
        "grpc_restricted_protocol",
        "Specify restricted GRPC protocol setting. The format of this flag is "
        "--grpc-restricted-protocol=<protocols>:<key>=<value>. Where <protocol> is a "
        "comma-separated list of protocols to be restricted. <key> will be additional header key "
        "to be checked when a GRPC request is received, and <value> is the value expected to be "
        "matched. Allowed protocols: " + RESTRICTED_GROUPS,
        repeat=True,
        convert=grpc_restriction,
        arg="<string>:<string>=<string>",
    ),
]
METRICS = [
    setting(
        "allow-metrics",
        Kind.BOOL,
        "allow_metrics",
        "Allow the server to provide prometheus metrics.",
    ),
    setting(
        "allow-gpu-metrics",
        Kind.BOOL,
        "allow_gpu_metrics",
        "Allow the server to provide GPU metrics. Ignored unless --allow-metrics is true.",
    ),
    setting(
        "allow-cpu-metrics",
        Kind.BOOL,
        "allow_cpu_metrics",
        "Allow the server to provide CPU metrics. Ignored unless --allow-metrics is true.",
    ),
    setting(
        "metrics-address",
        Kind.STRING,
        "metrics_address",
        "The address for the metrics server to bind to. Default is the same as --http-address.",
    ),
    setting(
        "metrics-port",
        Kind.INT,
        "metrics_port",
        "The port reporting prometheus metrics. Default is 8002.",
    ),
    setting(
        "metrics-interval-ms",
        Kind.INT,
        "metrics_interval_ms",
        "Metrics will be collected once every <metrics-interval-ms> milliseconds. Default is 2000 "
        "milliseconds.",
        note="An integer, as tritonserver reads it (its `--help` says `<float>`).",
    ),
    setting(
        "metrics-config",
        Kind.STRING,
        "metrics_config",
        "Specify a metrics-specific configuration setting. The format of this flag is "
        "--metrics-config=<setting>=<value>. It can be specified multiple times.",
        repeat=True,
        convert=metrics_config,
        arg="<string>=<string>",
    ),
]
TRACING = [
    setting(
        "trace-config",
        Kind.STRING,
        "trace_config",
        "Specify global or trace mode specific configuration setting. The format of this flag is "
        '--trace-config <mode>,<setting>=<value>. Where <mode> is either "triton" or '
        '"opentelemetry". The default is "triton". To specify global trace settings (level, rate, '
        "count, or mode), the format would be --trace-config <setting>=<value>.",
        repeat=True,
        convert=trace_config,
        arg="<string>,<string>=<string>",
    ),
]
BACKEND = [
    ignored(
        "backend-directory",
        Kind.STRING,
        "The global directory searched for backend shared libraries. Default is "
        "'/opt/tritonserver/backends'.",
    ),
    setting(
        "backend-config",
        Kind.STRING,
        "backend_config",
        "Specify a backend-specific configuration setting. The format of this flag is "
        "--backend-config=<backend_name>,<setting>=<value>. Where <backend_name> is the name of "
        "the backend, such as 'tensorrt'.",
        repeat=True,
        convert=backend_config,
        arg="<string>,<string>=<string>",
        note="Checked, logged, without effect: no backend setting applies to this server.",
    ),
]
OTHERS = [
    ignored(
        "repoagent-directory",
        Kind.STRING,
        "The global directory searched for repository agent shared libraries.",
    ),
    ignored(
        "cache-config",
        Kind.STRING,
        "Specify a cache-specific configuration setting.",
        convert=cache_config,
        note=NO_RESPONSE_CACHE,
        arg="<string>,<string>=<string>",
    ),
    ignored(
        "cache-directory", Kind.STRING, "The global directory searched for cache shared libraries."
    ),
    ignored(
        "rate-limit",
        Kind.STRING,
        'Specify the mode for rate limiting. Options are "execution_count" and "off".',
    ),
    ignored(
        "rate-limit-resource",
        Kind.STRING,
        "The number of resources available to the server.",
        arg="<string>:<integer>:<integer>",
    ),
    ignored(
        "pinned-memory-pool-byte-size",
        Kind.INT,
        "The total byte size that can be allocated as pinned system memory.",
    ),
    ignored(
        "cuda-memory-pool-byte-size",
        Kind.STRING,
        "The total byte size that can be allocated as CUDA memory for the GPU device.",
        arg="<integer>:<integer>",
    ),
    ignored(
        "cuda-virtual-address-size",
        Kind.STRING,
        "The total CUDA virtual address size that will be used for each implicit state.",
        arg="<integer>:<integer>",
    ),
    ignored(
        "min-supported-compute-capability",
        Kind.FLOAT,
        "The minimum supported CUDA compute capability.",
    ),
    ignored(
        "buffer-manager-thread-count",
        Kind.INT,
        "The number of threads used to manage tensor contents.",
    ),
    ignored(
        "host-policy",
        Kind.STRING,
        "Specify a host policy setting associated with a policy name.",
        arg="<string>,<string>=<string>",
    ),
    ignored(
        "model-load-gpu-limit",
        Kind.STRING,
        "Specify the limit on GPU memory usage as a fraction.",
        arg="<device_id>:<fraction>",
    ),
    ignored(
        "allow-client-shm",
        Kind.BOOL,
        "Allow clients to register/unregister and use shared memory regions. Default is false.",
        note="Shared-memory requests are always refused.",
    ),
    ignored(
        "strict-model-config",
        Kind.BOOL,
        "DEPRECATED: If true model configuration files must be provided.",
    ),
    ignored(
        "response-cache-byte-size",
        Kind.INT,
        "DEPRECATED: Please use --cache-config instead.",
        note=NO_RESPONSE_CACHE,
    ),
    ignored(
        "trace-file",
        Kind.STRING,
        "DEPRECATED: Please use --trace-config triton,file=<path/to/your/file>",
        note="Trace files are not written: --trace-config mode=opentelemetry exports traces.",
    ),
    setting(
        "trace-level",
        Kind.STRING,
        "trace_config",
        "DEPRECATED: Please use --trace-config level=<OFF|TIMESTAMPS|TENSORS>",
        repeat=True,
        convert=deprecated_trace("level"),
        note="The same as --trace-config level=<value>.",
    ),
    setting(
        "trace-rate",
        Kind.INT,
        "trace_config",
        "DEPRECATED: Please use --trace-config rate=<rate value>",
        repeat=True,
        convert=deprecated_trace("rate"),
        note="The same as --trace-config rate=<value>.",
    ),
    setting(
        "trace-count",
        Kind.INT,
        "trace_config",
        "DEPRECATED: Please use --trace-config count=<count value>",
        repeat=True,
        convert=deprecated_trace("count"),
        note="The same as --trace-config count=<value>.",
    ),
    setting(
        "trace-log-frequency",
        Kind.INT,
        "trace_config",
        "DEPRECATED: Please use --trace-config triton,log-frequency=<value>",
        repeat=True,
        convert=deprecated_trace("triton,log-frequency"),
        note="The same as --trace-config triton,log-frequency=<value>.",
    ),
]
