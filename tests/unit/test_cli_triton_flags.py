"""Triton's flags that tritonserver accepts never stop this server: each applies, or is taken
with a warning saying why it has no effect here; a bad value is refused in one line. And
Triton's options table, logged at start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import app as package
from app.cli.main import settings_from, warn_ignored
from app.cli.options_table import option_rows, options_table
from app.settings import Settings

FORMERLY_REFUSED = [
    "--cache-config=local,size=1048576",
    "--response-cache-byte-size=1048576",
    "--model-namespacing=true",
    "--http-header-forward-pattern=.*",
    "--grpc-header-forward-pattern=.*",
    "--trace-file=/tmp/trace.json",
]


def test_every_flag_triton_accepts_is_taken_with_a_warning_where_it_has_no_effect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    command_line = settings_from(FORMERLY_REFUSED, "tritonserver")[1]
    assert command_line.ignored == FORMERLY_REFUSED
    with caplog.at_level(logging.WARNING, logger="app.cli"):
        warn_ignored(command_line.ignored)
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == len(FORMERLY_REFUSED)
    assert warnings[0] == (
        "--cache-config=local,size=1048576: accepted for compatibility with tritonserver; it "
        "has no effect here: Triton's response cache does not apply to decoupled models, which "
        "every vLLM model is."
    )


def test_the_deprecated_trace_flags_are_their_trace_config_settings() -> None:
    settings = settings_from(
        ["--trace-level=TIMESTAMPS", "--trace-rate=10", "--trace-count", "5"], "tritonserver"
    )[0]
    assert settings.trace_config == ["level=TIMESTAMPS", "rate=10", "count=5"]
    frequency = settings_from(["--trace-log-frequency=2"], "tritonserver")[0]
    assert frequency.trace_config == ["triton,log-frequency=2"]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (
            ["--cache-config=size=1048576"],
            'tritonserver: Bad option: "--cache-config". No cache specified. --cache-config '
            "option format is <cache name>,<setting>=<value>. Got size=1048576",
        ),
        (
            ["--response-cache-byte-size=lots"],
            'tritonserver: Bad option: "--response-cache-byte-size". '
            "Invalid option value. Got lots",
        ),
        (
            ["--trace-level=LOUD"],
            'tritonserver: Bad option: "--trace-level". invalid value for trace level option: '
            "loud. Got ['level=LOUD']",
        ),
    ],
)
def test_a_bad_value_is_refused_in_one_line_before_the_usage_pointer(
    capsys: pytest.CaptureFixture[str], argv: list[str], reason: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        settings_from(argv, "tritonserver")
    assert exited.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        reason,
        "Usage: tritonserver [options] ('tritonserver --help' lists them)",
    ]


def test_the_options_table_has_tritons_rows_with_this_servers_values() -> None:
    settings = Settings(model_repository=[Path("/models")])
    assert dict(option_rows(settings, {})) == {
        "server_id": "triton-vllm-generate",
        "server_version": package.__version__,
        "server_extensions": "model_repository model_configuration generate statistics trace "
        "logging",
        "model_repository_path[0]": "/models",
        "model_control_mode": "MODE_NONE",
        "strict_model_config": "0",
        "model_config_name": "",
        "rate_limit": "OFF",
        "pinned_memory_pool_byte_size": "268435456",
        "min_supported_compute_capability": "6.0",
        "strict_readiness": "1",
        "exit_timeout": "30",
        "cache_enabled": "0",
    }


def test_the_options_table_of_a_triton_launch_line() -> None:
    settings, command_line = settings_from(
        [
            "--model-repository=/first",
            "--model-repository=/second",
            "--model-control-mode=explicit",
            "--load-model=alpha",
            "--strict-readiness=false",
            "--exit-timeout-secs=5",
            "--pinned-memory-pool-byte-size=1024",
            "--cache-config=local,size=1048576",
        ],
        "tritonserver",
    )
    table = options_table(settings, command_line.ignored)
    assert "\n| Option                           | Value" in table
    rows = dict(option_rows(settings, {"pinned-memory-pool-byte-size": "1024"}))
    assert [rows[f"model_repository_path[{i}]"] for i in (0, 1)] == ["/first", "/second"]
    assert (rows["model_control_mode"], rows["startup_models_0"]) == ("MODE_EXPLICIT", "alpha")
    assert (rows["strict_readiness"], rows["exit_timeout"]) == ("0", "5")
    assert (rows["pinned_memory_pool_byte_size"], rows["cache_enabled"]) == ("1024", "0")
    assert "| pinned_memory_pool_byte_size     | 1024" in table


def test_model_config_name_is_a_setting_without_warning_and_an_options_row(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings, command_line = settings_from(["--model-config-name=h100"], "tritonserver")
    assert settings.model_config_name == "h100" and command_line.ignored == []
    with caplog.at_level(logging.WARNING, logger="app.cli"):
        warn_ignored(command_line.ignored)
    assert caplog.records == []
    assert dict(option_rows(settings, {}))["model_config_name"] == "h100"
    assert "| model_config_name                | h100" in options_table(settings)
