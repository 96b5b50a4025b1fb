"""OpenAI's generating routes, as the OpenAI frontend and a model's OpenAI API name them."""

from __future__ import annotations

import enum

__all__ = ["OpenAIEndpoint"]


class OpenAIEndpoint(enum.Enum):
    """`/v1/completions`, `/v1/chat/completions` and `/v1/responses`, each valued by the body
    field that holds its prompt."""

    COMPLETIONS = "prompt"
    CHAT_COMPLETIONS = "messages"
    RESPONSES = "input"
