"""OpenAI's generating routes, as the OpenAI frontend and a model's OpenAI API name them."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = ["OpenAIEndpoint"]


class OpenAIEndpoint(enum.Enum):
    """`/v1/completions`, `/v1/chat/completions` and `/v1/responses`, each valued by the body
    field that holds its prompt."""

    COMPLETIONS = "prompt"
    CHAT_COMPLETIONS = "messages"
    RESPONSES = "input"

    def max_tokens_field(self, body: Mapping[str, Any]) -> str:
        """The field that bounds the new tokens of `body`: chat's `max_completion_tokens`
        where it is set (`max_tokens` is deprecated there), the Responses API's
        `max_output_tokens`, else `max_tokens`."""
        if self is OpenAIEndpoint.RESPONSES:
            return "max_output_tokens"
        if (
            self is OpenAIEndpoint.CHAT_COMPLETIONS
            and body.get("max_completion_tokens") is not None
        ):
            return "max_completion_tokens"
        return "max_tokens"
