"""The server's limits on an OpenAI body as the client sent it, checked once by the frontend
before the request is admitted: O(1) per field, against the core's limit table, so that a
body far above a limit is refused before any work whose size it chooses (vLLM's request
models reading it, a place in the model's queue). What vLLM reads differently from the text
(`n: "9"` is 9 to it) and the model's own bounds are the engine adapter's to check."""

from __future__ import annotations

from typing import Any

from app.core.limits import (
    RequestLimits,
    check_count,
    check_name,
    check_sampling,
    count_prompts,
    integer,
)
from app.errors import InvalidRequestError

__all__ = ["check_body", "check_conversation"]

PROMPT_FIELD = "prompt"
REQUEST_ID_FIELD = "request_id"
CONVERSATION_FIELDS = ("messages", "input")
"""Chat's `messages` and the Responses API's `input` items: vLLM's request models read each
message (and each of its content parts) at a cost of microseconds, on the event loop."""
TOOLS_FIELD = "tools"
MESSAGE_LISTS = ("content", "tool_calls")
"""A message's lists that vLLM reads entry by entry: its content parts, an assistant's tool
calls."""


def check_body(body: dict[str, Any], limits: RequestLimits, max_tokens: str) -> None:
    """Refuse, naming the field, a body above the server's limits: `best_of`, `n`, the
    `max_tokens` field, stop strings, token-id lists, grammars, prompt batches and the
    request's id, messages and tools."""
    check_best_of(body.get("best_of"))
    check_request_id(body.get(REQUEST_ID_FIELD))
    check_conversation(body, limits)
    check_sampling(body, limits, max_tokens_field=max_tokens)
    check_count(PROMPT_FIELD, count_prompts(body.get(PROMPT_FIELD)), limits.max_prompts)


def check_best_of(value: Any) -> None:
    """vLLM's engine samples exactly `n` choices and its request models drop `best_of`
    unread: one asking for more than one choice is refused, naming it."""
    if value is not None and integer(value) != 1:
        raise InvalidRequestError(
            "best_of: not supported (the engine returns every choice it samples): use n",
            param="best_of",
        )


def check_request_id(value: Any) -> None:
    """vLLM names the request by the body's `request_id`, and repeats it in every chunk of
    the answer: one longer than a name is refused, naming it."""
    if isinstance(value, str):
        check_name(REQUEST_ID_FIELD, value, "an id")


def check_conversation(body: dict[str, Any], limits: RequestLimits) -> None:
    """Refuse, naming the field, more messages, content parts or tools than the server's
    limits: O(messages), before vLLM's request models read them."""
    for field in CONVERSATION_FIELDS:
        messages = body.get(field)
        if isinstance(messages, list):
            check_count(field, len(messages), limits.max_messages, "messages")
            check_content_parts(field, messages, limits.max_content_parts)
    tools = body.get(TOOLS_FIELD)
    if isinstance(tools, list):
        check_count(TOOLS_FIELD, len(tools), limits.max_tools, "tools")


def check_content_parts(field: str, messages: list[Any], limit: int | None) -> None:
    """Refuse messages whose content parts and tool calls together are more than `limit`,
    naming the message's list where the count went over."""
    if limit is None:
        return
    parts = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        for name in MESSAGE_LISTS:
            entries = message.get(name)
            if isinstance(entries, list):
                parts += len(entries)
                if parts > limit:
                    what = "content parts and tool calls"
                    check_count(f"{field}[{index}].{name}", parts, limit, what)
