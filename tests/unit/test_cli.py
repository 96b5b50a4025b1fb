"""The command line (`tritonserver`, `python -m app`): Triton's flags, defaults and messages,
the flags of ours, and what it prints on a mistake (without starting a server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli.catalog import all_flags, usage
from app.cli.main import log_to, settings_from
from app.settings import Settings


def settings(*argv: str) -> Settings:
    return settings_from(list(argv), "tritonserver")[0]


USAGE_LINE = "Usage: tritonserver [options] ('tritonserver --help' lists them)"


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """The reasons printed (standard error) for a command line it refuses, one line each
    (getopt's own line, or Triton's message after the program's name), before one line on
    where the usage is: the reason is what a terminal shows last."""
    with pytest.raises(SystemExit) as exited:
        settings_from(list(argv), "tritonserver")
    assert exited.value.code == 1
    *reasons, last = capsys.readouterr().err.rstrip("\n").split("\n")
    assert last == USAGE_LINE
    assert all(line.startswith("tritonserver: ") for line in reasons), reasons
    return [line.removeprefix("tritonserver: ") for line in reasons]


def test_triton_defaults_without_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = settings()
    assert (parsed.host, parsed.port, parsed.grpc_port) == ("0.0.0.0", 8000, 8001)
    assert (parsed.allow_http, parsed.allow_grpc, parsed.allow_metrics) == (True, True, True)
    assert (parsed.exit_on_error, parsed.strict_readiness, parsed.drain_timeout_seconds) == (
        True,
        True,
        30,
    )
    assert (parsed.log_verbose, parsed.log_info, parsed.log_warning, parsed.log_error) == (
        0,
        True,
        True,
        True,
    )
    assert (parsed.log_format, parsed.model_control_mode, parsed.repository_poll_secs) == (
        "default",
        "none",
        15,
    )


def test_a_triton_launch_line(tmp_path_factory: pytest.TempPathFactory) -> None:
    first, second = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    parsed = settings(
        f"--model-repository={first}",
        "--model-store",
        str(second),
        "--http-port",
        "18000",
        "--grpc-port=18001",
        "--metrics-port=18002",
        "--http-address=127.0.0.1",
        "--grpc-address",
        "127.0.0.2",
        "--metrics-address=127.0.0.3",
        "--log-verbose=1",
        "--log-info=off",
        "--log-warning",
        "ON",
        "--log-error=0",
        "--log-format=ISO8601",
        "--exit-timeout-secs=12",
        "--exit-on-error=false",
        "--strict-readiness=False",
        "--allow-metrics=1",
        "--backend-config=vllm,some-setting=1",
        "--backend-config=python,shm-region-prefix-name=prefix1",
    )
    assert parsed.model_repository == [first, second]
    assert (parsed.port, parsed.grpc_port, parsed.metrics_port) == (18000, 18001, 18002)
    assert (parsed.host, parsed.grpc_address, parsed.metrics_address) == (
        "127.0.0.1",
        "127.0.0.2",
        "127.0.0.3",
    )
    assert (parsed.log_verbose, parsed.log_info, parsed.log_warning, parsed.log_error) == (
        1,
        False,
        True,
        False,
    )
    assert (parsed.log_format, parsed.drain_timeout_seconds) == ("ISO8601", 12)
    assert (parsed.exit_on_error, parsed.strict_readiness, parsed.allow_metrics) == (
        False,
        False,
        True,
    )
    assert parsed.backend_config == ["vllm,some-setting=1", "python,shm-region-prefix-name=prefix1"]


def test_security_flags_reach_their_settings(tmp_path_factory: pytest.TempPathFactory) -> None:
    parsed = settings(
        "--model-control-mode=EXPLICIT",
        "--load-model=alpha",
        "--load-model",
        "beta",
        "--http-restricted-api=model-repository,logging:admin-key=secret",
        "--grpc-restricted-protocol=inference:token=t",
        "--grpc-use-ssl-mutual=true",
        "--grpc-server-cert=/certs/server.pem",
        "--grpc-server-key=/certs/server.key",
        "--grpc-root-cert=/certs/ca.pem",
    )
    assert (parsed.model_control_mode, parsed.load_model) == ("explicit", ["alpha", "beta"])
    assert parsed.http_restricted_api == ["model-repository,logging:admin-key=secret"]
    assert parsed.grpc_restricted_protocol == ["inference:token=t"]
    assert parsed.grpc_use_ssl and parsed.grpc_use_ssl_mutual, "as Triton, mutual TLS turns TLS on"


def test_the_flags_of_python_m_app_keep_working() -> None:
    parsed = settings(
        "--models", "alpha", "beta", "--host", "127.0.0.1", "--port", "9000", "--log-level", "debug"
    )
    assert (parsed.models, parsed.host, parsed.port, parsed.log_level) == (
        ["alpha", "beta"],
        "127.0.0.1",
        9000,
        "debug",
    )


def test_every_setting_has_a_flag_of_its_name() -> None:
    names = {flag.name for flag in all_flags()}
    assert {name.replace("_", "-") for name in Settings.model_fields} <= names
    parsed = settings(
        "--max-n=4",
        "--api-keys=a",
        "--api-keys",
        "b",
        "--engine-restart=false",
        "--frontend-processes=1",
    )
    assert (parsed.max_n, parsed.api_keys, parsed.engine_restart, parsed.frontend_processes) == (
        4,
        ["a", "b"],
        False,
        1,
    )


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "7000")
    monkeypatch.setenv("MAX_N", "3")
    parsed = settings("--http-port=7001")
    assert (parsed.port, parsed.max_n) == (7001, 3)


def test_unique_prefixes_are_taken_as_getopt_takes_them() -> None:
    assert settings("--exit-timeout=5", "--strict-read", "false").drain_timeout_seconds == 5


def test_ignored_flags_are_accepted_and_reported() -> None:
    _, command_line = settings_from(
        [
            "--http-thread-count=16",
            "--disable-auto-complete-config",
            "--pinned-memory-pool-byte-size",
            "1",
        ],
        "tritonserver",
    )
    assert command_line.ignored == [
        "--http-thread-count=16",
        "--disable-auto-complete-config",
        "--pinned-memory-pool-byte-size=1",
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--http-port", "abc"], ['Bad option: "--http-port". Invalid option value. Got abc']),
        (
            ["--grpc-port=99999999999"],
            ['Bad option: "--grpc-port". Provided option value is out of bound. Got 99999999999'],
        ),
        (
            ["--allow-http=maybe"],
            ['Bad option: "--allow-http". invalid value for bool option: maybe'],
        ),
        (["--log-format=json"], ['Bad option: "--log-format". invalid argument for --log-format']),
        (
            ["--model-control-mode=sometimes"],
            ['Bad option: "--model-control-mode". invalid argument for --model-control-mode'],
        ),
        (["--http-port"], ["option '--http-port' requires an argument"]),
        (["--no-such-flag=1"], ["unrecognized option '--no-such-flag=1'"]),
        (
            ["--disable-auto-complete-config=1"],
            ["option '--disable-auto-complete-config' doesn't allow an argument"],
        ),
        (
            ["--grpc-use"],
            [
                "option '--grpc-use' is ambiguous; "
                "possibilities: '--grpc-use-ssl' '--grpc-use-ssl-mutual'"
            ],
        ),
        (
            ["--rate=off"],
            ["option '--rate' is ambiguous; possibilities: '--rate-limit' '--rate-limit-resource'"],
        ),
        (["serve"], ["Unexpected argument: serve"]),
        (
            ["--load-model=alpha"],
            [
                "Error: Use of '--load-model' "
                "requires setting '--model-control-mode=explicit' as well."
            ],
        ),
        (
            ["--model-control-mode=explicit", "--load-model=*", "--load-model=beta"],
            ["Error: '--load-model=*' must be the only --load-model argument."],
        ),
        (
            ["--grpc-port=8000"],
            [
                "The server cannot listen to HTTP requests and GRPC requests "
                "at the same address and port 0.0.0.0:8000"
            ],
        ),
        (
            ["--http-restricted-api=everything:k=v"],
            ["Bad option: \"--http-restricted-api\". unknown restricted api 'everything'"],
        ),
        (
            ["--backend-config=vllm"],
            [
                'Bad option: "--backend-config". --backend-config option format is '
                "'<backend name>,<setting>=<value>'. Got vllm"
            ],
        ),
        (
            ["--metrics-config=a,b=c"],
            [
                'Bad option: "--metrics-config". --metrics-config option format is '
                "<setting>=<value>. Got a,b=c"
            ],
        ),
        (
            ["--http-port=70000"],
            ['Bad option: "--http-port". Input should be less than or equal to 65535. Got 70000'],
        ),
        (
            ["--metrics-interval-ms=2.5"],
            ['Bad option: "--metrics-interval-ms". Invalid option value. Got 2.5'],
        ),
    ],
)
def test_mistakes_get_tritons_messages(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: list[str]
) -> None:
    assert refusal(capsys, *argv) == expected


def test_a_bad_environment_variable_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_N", "0")
    assert refusal(capsys) == [
        'Bad option: "MAX_N". Input should be greater than or equal to 1. Got 0'
    ]


def test_help_lists_every_flag_and_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        settings_from(["--help"], "tritonserver")
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: tritonserver [options]\n")
    for flag in all_flags():
        assert f"  --{flag.name}" in out
    for name in Settings.model_fields:
        assert name.upper() in out, f"--help names the variable of {name}"


def test_the_backend_readmes_python_launch_line_is_taken_as_written() -> None:
    """The vLLM backend's README (several servers on one host): the shared-memory prefix is a
    Python-backend setting with no effect here."""
    parsed = settings(
        "--model-repository=/models", "--backend-config=python,shm-region-prefix-name=prefix1"
    )
    assert parsed.model_repository == [Path("/models")]
    assert parsed.backend_config == ["python,shm-region-prefix-name=prefix1"]


def test_log_file_is_read_by_the_command_line_as_triton_reads_it() -> None:
    """No setting: only the command line names the file (the last --log-file wins)."""
    parsed, command_line = settings_from(
        ["--log-file=/tmp/first.log", "--log-file", "/tmp/server.log"], "tritonserver"
    )
    assert command_line.options == {"log-file": "/tmp/server.log"}
    assert command_line.ignored == [] and parsed == settings()


def test_a_log_file_that_cannot_be_opened_stops_the_start(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        log_to(settings(), str(tmp_path / "missing" / "server.log"))
    assert exited.value.code == 1
    assert capsys.readouterr().err == (
        "error: setting log file: Internal - Failed to open log file: No such file or directory\n"
    )


def test_metrics_interval_is_an_integer_of_milliseconds_in_help_and_parser() -> None:
    assert "  --metrics-interval-ms <integer>\n" in usage()
    assert settings("--metrics-interval-ms", "250").metrics_interval_ms == 250
