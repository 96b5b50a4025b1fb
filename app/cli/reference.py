"""Files generated from the settings definition (app/settings.py, its fields in
app/settings_fields.py) and the flag tables, so that none can drift from what the server reads:

    docs/reference/settings.md                  every setting: flags, variable, default, meaning
    docs/operations-triton.md (its flag tables)  Triton's flags beside ours
    configs/server.example.toml                 every setting with its default, commented out
    charts/triton-vllm-generate/values.schema.json   the chart's `settings` map, typed

`python -m app.cli.reference` writes them; `--check` fails (exit 1) when one differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.cli.catalog import TRITON_GROUPS, all_flags, default_text, env_name
from app.cli.flags import Effect, Flag
from app.cli.triton_defaults import TRITON_DEFAULTS
from app.paths import PROJECT_ROOT
from app.settings import Settings

GENERATED = "Generated from app/settings.py by `python -m app.cli.reference`: do not edit by hand."
SETTINGS_PAGE = PROJECT_ROOT / "docs" / "reference" / "settings.md"
TRITON_PAGE = PROJECT_ROOT / "docs" / "operations-triton.md"
TOML_EXAMPLE = PROJECT_ROOT / "configs" / "server.example.toml"
VALUES_SCHEMA = PROJECT_ROOT / "charts" / "triton-vllm-generate" / "values.schema.json"
BEGIN, END = "<!-- BEGIN GENERATED FLAG TABLES -->", "<!-- END GENERATED FLAG TABLES -->"
LIST_FORMATS = {
    "split_commas": "comma-separated",
    "split_semicolons": "';'-separated, or a JSON list",
    "repository_list": "one path, or a JSON list",
}
"""How a list setting is written in one environment variable, by the validator that reads it."""


SECURITY = [
    "model_control_mode",
    "load_model",
    "model_config_name",
    "repository_poll_secs",
    "exit_on_error",
    "strict_readiness",
    "backend_config",
    "load_override_max_files",
    "reload_in_place",
    "drain_timeout_seconds",
    "http_restricted_api",
    "grpc_restricted_protocol",
    "grpc_use_ssl",
    "grpc_use_ssl_mutual",
    "grpc_server_cert",
    "grpc_server_key",
    "grpc_root_cert",
    "http_ssl_certfile",
    "http_ssl_keyfile",
    "http_ssl_ca_certs",
    "http_header_timeout_seconds",
    "http_keep_alive_seconds",
]
SECTIONS: list[tuple[str, Callable[[str], bool]]] = [
    ("Logging", lambda name: name.startswith("log_")),
    ("Model control, reloads, security", lambda name: name in SECURITY),
    (
        "Limits",
        lambda name: name.startswith(("max_", "grammar_")) or name == "request_timeout_seconds",
    ),
    ("Authentication and CORS", lambda name: name.startswith(("api_keys", "auth_", "cors_"))),
    ("Engine supervision", lambda name: name.startswith("engine_")),
    ("Triton gRPC", lambda name: name.startswith(("grpc_", "allow_grpc"))),
    ("Metrics and tracing", lambda name: "metrics" in name or name.startswith("trace_")),
    ("Server", lambda name: True),
]
"""The reference page's sections, each setting in the first whose rule it meets."""


def section_of(setting: str) -> str:
    return next(title for title, rule in SECTIONS if rule(setting))


def flags_of(setting: str) -> list[str]:
    return [f"`--{flag.name}`" for flag in all_flags() if flag.setting == setting]


def list_format(setting: str) -> str:
    for name, validator in Settings.__pydantic_decorators__.field_validators.items():
        if setting in validator.info.fields and name in LIST_FORMATS:
            return LIST_FORMATS[name]
    return "a JSON list"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def setting_row(name: str) -> str:
    info = Settings.model_fields[name]
    description = info.description or ""
    if str(info.annotation).startswith("list["):
        description += f" In the environment: {list_format(name)}."
    flags = ", ".join(flags_of(name))
    return f"| `{env_name(name)}` | {flags} | `{cell(default_text(info))}` | {cell(description)} |"


def settings_sections() -> list[str]:
    """Each section's table, the sections in the server's order (Server first)."""
    lines = []
    for title in [SECTIONS[-1][0], *(title for title, _ in SECTIONS[:-1])]:
        names = [name for name in Settings.model_fields if section_of(name) == title]
        lines += ["", f"## {title}", "", "| variable | flags | default | |", "|---|---|---|---|"]
        lines += [setting_row(name) for name in names]
    return lines


def settings_page() -> str:
    return "\n".join(
        [
            "# Settings reference",
            "",
            f"<!-- {GENERATED} -->",
            "",
            "Every setting of the server. Each is read from, first to last: "
            "its command-line flag, its",
            "environment variable (the name below), "
            "the TOML file named by `SETTINGS_FILE` (default",
            "`configs/server.toml`; "
            "the same name in lower case, e.g. `max_n = 4`), then its default.",
            "`configs/server.example.toml` lists them all. How they are read:",
            "[Configuration](../configuration.md); Triton's flags beside ours:",
            "[Operating it like Triton](../operations-triton.md).",
            *settings_sections(),
            "",
        ]
    )


def triton_row(flag: Flag) -> str:
    triton_default = TRITON_DEFAULTS.get(flag.name, "")
    if flag.effect is Effect.SETTING and flag.setting is not None:
        info = Settings.model_fields[flag.setting]
        ours = f"`{env_name(flag.setting)}`"
        our_default = f"`{cell(default_text(info))}`"
    elif flag.effect is Effect.COMMAND_LINE:
        ours, our_default = "command line only", "the console"
    else:
        ours, our_default = "accepted, no effect", ""
    triton_cell = f"`{cell(triton_default)}`" if triton_default else ""
    return f"| `--{flag.name}` | {triton_cell} | {ours} | {our_default} | {cell(flag.note)} |"


def triton_tables() -> str:
    parts = [BEGIN, f"<!-- {GENERATED} -->", ""]
    for title, flags in TRITON_GROUPS:
        parts += [
            f"### {title}",
            "",
            "| Triton's flag | Triton's default | here | our default | |",
            "|---|---|---|---|---|",
        ]
        parts += [triton_row(flag) for flag in flags if flag.name != "help"]
        parts.append("")
    parts.append(END)
    return "\n".join(parts)


def triton_page(current: str) -> str:
    """The page with its generated part replaced (the prose around it is written by hand)."""
    start, end = current.index(BEGIN), current.index(END) + len(END)
    return current[:start] + triton_tables() + current[end:]


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)


def toml_example() -> str:
    lines = [
        "# Every server setting with its default. Copy this file to configs/server.toml (or name",
        "# another with SETTINGS_FILE) and uncomment what you change; environment variables and",
        "# command-line flags override it (docs/reference/settings.md).",
        f"# {GENERATED}",
    ]
    for name, info in Settings.model_fields.items():
        lines += ["", *(f"# {line}" for line in wrap(info.description or ""))]
        default = json.loads(default_text(info))
        lines.append(
            f"# {name} = {toml_value(default)}"
            if default is not None
            else f"# {name} =   (not set)"
        )
    return "\n".join(lines) + "\n"


def wrap(text: str) -> list[str]:
    return textwrap.wrap(text, 96) or [""]


GRAFANA_DASHBOARD = {
    "type": "object",
    "description": "The Grafana dashboard in a ConfigMap for Grafana's dashboard sidecar "
    "(the chart's README).",
    "additionalProperties": False,
    "properties": {
        "enabled": {"type": "boolean", "default": False},
        "label": {"type": "string", "minLength": 1, "default": "grafana_dashboard"},
        "labelValue": {"type": "string", "default": "1"},
        "namespace": {"type": "string", "default": ""},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
"""The chart's `grafanaDashboard` value (no setting: the chart's own)."""


def values_schema() -> dict[str, Any]:
    """The chart's values schema: `settings` maps setting variables to typed values;
    `grafanaDashboard` is typed too."""
    properties = {}
    for name, schema in Settings.model_json_schema()["properties"].items():
        schema = strip(schema)
        if name == "model_repository":
            schema.pop("default", None)
        properties[env_name(name)] = schema
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$comment": GENERATED,
        "type": "object",
        "properties": {
            "settings": {
                "type": "object",
                "description": "Server settings, each passed to the container "
                "as its environment variable "
                "(docs/reference/settings.md).",
                "additionalProperties": False,
                "properties": properties,
            },
            "grafanaDashboard": GRAFANA_DASHBOARD,
        },
    }


def strip(schema: Any) -> Any:
    """Pydantic's schema without titles and path formats (not JSON-schema formats)."""
    if isinstance(schema, dict):
        return {
            key: strip(value)
            for key, value in schema.items()
            if key != "title" and (key, value) != ("format", "path")
        }
    if isinstance(schema, list):
        return [strip(item) for item in schema]
    return schema


def generated() -> dict[Path, str]:
    """Each generated file and its content."""
    return {
        SETTINGS_PAGE: settings_page(),
        TRITON_PAGE: triton_page(TRITON_PAGE.read_text()),
        TOML_EXAMPLE: toml_example(),
        VALUES_SCHEMA: json.dumps(values_schema(), indent=2) + "\n",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="fail when a generated file differs")
    check = parser.parse_args(argv).check
    stale = []
    for path, content in generated().items():
        if path.exists() and path.read_text() == content:
            continue
        stale.append(str(path.relative_to(PROJECT_ROOT)))
        if not check:
            path.write_text(content)
    if stale:
        print(("out of date: " if check else "written: ") + ", ".join(stale))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
