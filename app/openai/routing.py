"""What an OpenAI request is routed to one of a model's instances by (app/core/routing.py):
the prompt's text or token ids, or the chat messages' text in order; its adapter; the pin
header."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.core.routing import PIN_HEADER, RouteHint

CHARS_WANTED = 4096
"""Only the prompt's leading part makes the key: the messages' text is taken up to this."""


def route_hint(prompt: Any, adapter: str | None, headers: Mapping[str, str]) -> RouteHint:
    """The hint of a completions `prompt` or a chat's `messages` (as the body gives them; an
    invalid body routes by nothing and is refused by vLLM's checks)."""
    pin = headers.get(PIN_HEADER)
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], (int, dict)):
        prompt = prompt[0]  # several prompts: routed together, by the first
    if isinstance(prompt, str):
        return RouteHint(text=prompt, adapter=adapter, pin=pin)
    if isinstance(prompt, list) and all(isinstance(token, int) for token in prompt):
        return RouteHint(token_ids=prompt, adapter=adapter, pin=pin)
    if isinstance(prompt, list):
        return RouteHint(text=messages_text(prompt), adapter=adapter, pin=pin)
    return RouteHint(adapter=adapter, pin=pin)


def messages_text(messages: list[Any]) -> str:
    """The chat's text in order, each message's role then its content's text parts."""
    parts: list[str] = []
    length = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        for text in (str(message.get("role", "")), *content_texts(message.get("content"))):
            parts.append(text)
            length += len(text)
        if length >= CHARS_WANTED:
            break
    return "\n".join(parts)[:CHARS_WANTED]


def content_texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
    return []
