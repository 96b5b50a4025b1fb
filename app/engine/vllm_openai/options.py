"""A model's OpenAI API options: the `OPENAI_*` parameters of its config.pbtxt, each one the
vLLM server flag of the same name (`OPENAI_TOOL_CALL_PARSER` is `--tool-call-parser`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Json, ValidationError

from app.errors import ModelConfigError, did_you_mean
from app.repository.layout import ModelSpec

PREFIX = "OPENAI_"
TEMPLATE_MARKERS = ("{{", "{%")


class OpenAIOptions(BaseModel):
    """What vLLM's OpenAI server takes as flags, per model here (defaults: vLLM's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chat_template: str | None = None
    """A Jinja template, or a file (relative paths: from the model's folder); default: the
    tokenizer's own template."""
    chat_template_content_format: Literal["auto", "string", "openai"] = "auto"
    default_chat_template_kwargs: Json[dict[str, Any]] | None = None
    trust_request_chat_template: bool = False
    response_role: str = "assistant"
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    exclude_tools_when_tool_choice_none: bool = False
    tool_strict_level: Literal["auto", "function", "parameter"] | None = None
    """vLLM >= 0.30 only."""
    reasoning_parser: str | None = None
    """Also given to the engine (structured outputs start after the reasoning)."""
    enable_force_include_usage: bool = False
    enable_prompt_tokens_details: bool = False
    return_tokens_as_token_ids: bool = False


def option_names() -> list[str]:
    return [PREFIX + name.upper() for name in OpenAIOptions.model_fields]


def openai_options(spec: ModelSpec) -> OpenAIOptions:
    """The options of `spec`'s configuration file, or a `ModelConfigError` naming the parameter."""
    path = spec.config_path
    values = {
        key.removeprefix(PREFIX).lower(): value
        for key, value in spec.parameters.items()
        if key.startswith(PREFIX)
    }
    try:
        options = OpenAIOptions.model_validate(values)
    except ValidationError as exc:
        problems = [describe(error) for error in exc.errors()]
        raise ModelConfigError(f"{path}: {'; '.join(problems)}") from exc
    if options.chat_template is not None:
        template = chat_template_source(options.chat_template, spec.version_path.parent, path)
        options = options.model_copy(update={"chat_template": template})
    return options


def describe(error: Any) -> str:
    field = str(error["loc"][0]) if error.get("loc") else ""
    key = PREFIX + field.upper()
    if error.get("type") == "extra_forbidden":
        return f"unknown parameter '{key}'{did_you_mean(key, option_names())}"
    return f"parameter '{key}': {error.get('msg', 'invalid value')}"


def chat_template_source(value: str, model_dir: Path, config_path: Path) -> str:
    """A template given inline stays as it is; a file is found from the model's folder."""
    if any(marker in value for marker in TEMPLATE_MARKERS):
        return value
    candidate = Path(value).expanduser()
    if not candidate.is_absolute():
        candidate = model_dir / candidate
    if not candidate.is_file():
        raise ModelConfigError(f"{config_path}: OPENAI_CHAT_TEMPLATE: no such file {candidate}")
    return str(candidate)


def engine_reasoning_parser(
    options: OpenAIOptions, engine_args: dict[str, Any], path: Path
) -> str | None:
    """The one reasoning parser of the model: config.pbtxt's or model.json's, not two."""
    from_engine = engine_args.get("reasoning_parser") or None
    if options.reasoning_parser and from_engine and options.reasoning_parser != from_engine:
        raise ModelConfigError(
            f"{path}: OPENAI_REASONING_PARSER '{options.reasoning_parser}' differs from "
            f"model.json's reasoning_parser '{from_engine}'"
        )
    return options.reasoning_parser or from_engine
