"""Triton's flags of its Server, Logging, Model Repository and HTTP groups, each set onto a
setting of ours or accepted without effect (src/command_line_parser.cc)."""

from __future__ import annotations

from app.cli.flags import Effect, Flag, Kind, ignored, setting
from app.cli.values import (
    http_restriction,
    log_format,
    model_control_mode,
    positive,
)
from app.security.restrictions import ApiGroup

RESTRICTED_GROUPS = ", ".join(group.value for group in ApiGroup)

SERVER = [
    Flag(
        "help",
        Kind.NONE,
        "Print usage",
        effect=Effect.IGNORED,
        note="Prints this usage and exits 0.",
    ),
    ignored("id", Kind.STRING, "Identifier for this server.", note="Not reported."),
    setting(
        "exit-timeout-secs",
        Kind.INT,
        "drain_timeout_seconds",
        "Timeout (in seconds) when exiting to wait for in-flight inferences to finish. After the "
        "timeout expires the server exits even if inferences are still in flight.",
        convert=lambda value: max(0, value),
        note="Also bounds the drain of an unloaded model.",
    ),
]
LOGGING = [
    setting(
        "log-verbose",
        Kind.LOG_VERBOSE,
        "log_verbose",
        "Set verbose logging level. Zero (0) disables verbose logging and values >= 1 enable "
        "verbose logging.",
        arg="integer",
        note="Verbose messages are Python's debug records.",
    ),
    setting("log-info", Kind.BOOL, "log_info", "Enable/disable info-level logging."),
    setting("log-warning", Kind.BOOL, "log_warning", "Enable/disable warning-level logging."),
    setting("log-error", Kind.BOOL, "log_error", "Enable/disable error-level logging."),
    setting(
        "log-format",
        Kind.STRING,
        "log_format",
        'Set the logging format. Options are "default" and "ISO8601". The default is "default". '
        'For "default", the log severity (L) and timestamp will be logged as "LMMDD '
        'hh:mm:ss.ssssss". For "ISO8601", the log format will be "YYYY-MM-DDThh:mm:ssZ L".',
        convert=log_format,
        note="LOG_FORMAT also takes text and json.",
    ),
    Flag(
        "log-file",
        Kind.STRING,
        "Set the name of the log output file. If specified, log outputs will be saved to this "
        "file. If not specified, log outputs will stream to the console.",
        effect=Effect.COMMAND_LINE,
        note="Appended to, by every frontend process; vLLM's own lines stay on the console, "
        "as under Triton's vLLM backend.",
    ),
]
MODEL_REPOSITORY = [
    setting(
        "model-store",
        Kind.STRING,
        "model_repository",
        "Equivalent to --model-repository.",
        repeat=True,
    ),
    setting(
        "model-repository",
        Kind.STRING,
        "model_repository",
        "Path to model repository directory. It may be specified multiple times to add multiple "
        "model repositories. Note that if a model is not unique across all model repositories at "
        "any time, the model will not be available.",
        repeat=True,
    ),
    setting(
        "exit-on-error",
        Kind.BOOL,
        "exit_on_error",
        "Exit the inference server if an error occurs during initialization.",
    ),
    ignored(
        "disable-auto-complete-config",
        Kind.NONE,
        "If set, disables the triton and backends from auto completing model configuration files. "
        "Model configuration files must be provided and all required configuration settings must "
        "be specified.",
        note="The model configuration is always completed as the vLLM backend completes it.",
    ),
    setting(
        "strict-readiness",
        Kind.BOOL,
        "strict_readiness",
        "If true /v2/health/ready endpoint indicates ready if the server is responsive and all "
        "models are available. If false /v2/health/ready endpoint indicates ready if server is "
        "responsive even if some/all models are unavailable.",
    ),
    setting(
        "model-control-mode",
        Kind.STRING,
        "model_control_mode",
        'Specify the mode for model management. Options are "none", "poll" and "explicit". The '
        'default is "none". For "none", the server will load all models in the model '
        "repository(s) at startup and will not make any changes to the loaded models after that. "
        'For "poll", the server will poll the model repository(s) to detect changes and will '
        "load/unload models based on those changes. The poll rate is controlled by "
        "'repository-poll-secs'. For \"explicit\", model load and unload are initiated by using "
        "the model control APIs, and only models specified with --load-model will be loaded at "
        "startup.",
        convert=model_control_mode,
    ),
    setting(
        "repository-poll-secs",
        Kind.INT,
        "repository_poll_secs",
        "Interval in seconds between each poll of the model repository to check for changes. Valid "
        "only when --model-control-mode=poll is specified.",
    ),
    setting(
        "load-model",
        Kind.STRING,
        "load_model",
        "Name of the model to be loaded on server startup. It may be specified multiple times to "
        "add multiple models. To load ALL models at startup, specify '*' as the model name with "
        "--load-model=* as the ONLY --load-model argument, this does not imply any pattern "
        "matching. Specifying --load-model=* in conjunction with another --load-model argument "
        "will result in error. Note that this option will only take effect if "
        "--model-control-mode=explicit is true.",
        repeat=True,
    ),
    setting(
        "model-config-name",
        Kind.STRING,
        "model_config_name",
        "The custom configuration name for models to load. The name should not contain any "
        "space character. For example: --model-config-name=h100. If --model-config-name is not "
        "set, Triton will use the default config.pbtxt.",
        note="Each model is configured from configs/<name>.pbtxt in its folder where it has "
        "one, else from its config.pbtxt.",
    ),
    ignored(
        "model-load-thread-count",
        Kind.INT,
        "The number of threads used to concurrently load models.",
    ),
    ignored("model-load-retry-count", Kind.INT, "The number of retry to load a model."),
    ignored(
        "model-namespacing",
        Kind.BOOL,
        "Whether model namespacing is enable or not.",
        note="Model names are unique across repositories: a model in two is served from neither.",
    ),
    ignored(
        "enable-peer-access", Kind.BOOL, "Whether the server tries to enable peer access or not."
    ),
]
HTTP = [
    setting("allow-http", Kind.BOOL, "allow_http", "Allow the server to listen for HTTP requests."),
    setting(
        "http-address",
        Kind.STRING,
        "host",
        "The address for the http server to bind to. Default is 0.0.0.0",
    ),
    setting(
        "http-port",
        Kind.INT,
        "port",
        "The port for the server to listen on for HTTP requests. Default is 8000.",
    ),
    ignored(
        "reuse-http-port",
        Kind.BOOL,
        "Allow multiple servers to listen on the same HTTP port when every server has this "
        "option set.",
        note="FRONTEND_PROCESSES spreads one port over several processes.",
    ),
    ignored(
        "http-header-forward-pattern",
        Kind.STRING,
        "The regular expression pattern that will be used for forwarding HTTP headers as "
        "inference request parameters.",
        note="Headers are not forwarded as request parameters.",
    ),
    ignored("http-thread-count", Kind.INT, "Number of threads handling HTTP requests."),
    setting(
        "http-max-input-size",
        Kind.INT,
        "max_request_body_bytes",
        "Maximum allowed HTTP request input size in bytes.",
        convert=positive("--http-max-input-size"),
    ),
    setting(
        "http-restricted-api",
        Kind.STRING,
        "http_restricted_api",
        "Specify restricted HTTP api setting. The format of this flag is "
        "--http-restricted-api=<apis>:<key>=<value>. Where <api> is a comma-separated list of apis "
        "to be restricted. <key> will be additional header key to be checked when a HTTP "
        "request is "
        "received, and <value> is the value expected to be matched. Allowed APIs: "
        + RESTRICTED_GROUPS,
        repeat=True,
        convert=http_restriction,
        arg="<string>:<string>=<string>",
    ),
]
