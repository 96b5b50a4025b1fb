"""The OpenAI wire formats this frontend writes itself: model cards and errors. The generating
routes' bodies are vLLM's own models, published in the OpenAPI document by the composition
root (app/engine/vllm_openai/schemas.py: the models that validate them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

COMPLETION_EXAMPLE = {
    "id": "cmpl-5e7c6260c37f4d7f",
    "object": "text_completion",
    "created": 1795434763,
    "model": "smollm2",
    "choices": [
        {
            "index": 0,
            "text": " Paris.\n\nThe answer is:",
            "logprobs": None,
            "finish_reason": "length",
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 8, "total_tokens": 13},
}
CHAT_EXAMPLE = {
    "id": "chatcmpl-af383f93bf8ae824",
    "object": "chat.completion",
    "created": 1795434766,
    "model": "smollm2",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "The capital of France is Paris.",
                "tool_calls": [],
            },
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 37, "completion_tokens": 8, "total_tokens": 45},
}
RESPONSE_EXAMPLE: dict[str, Any] = {
    "id": "resp_91b3323f2c57d823",
    "object": "response",
    "created_at": 1795860063,
    "model": "smollm2",
    "status": "completed",
    "output": [
        {
            "id": "msg_993d2c62e9fb6730",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {
                    "type": "output_text",
                    "text": "The capital of France is Paris.",
                    "annotations": [],
                    "logprobs": None,
                }
            ],
        }
    ],
    "max_output_tokens": 32,
    "temperature": 0.0,
    "tool_choice": "none",
    "tools": [],
    "usage": {"input_tokens": 37, "output_tokens": 8, "total_tokens": 45},
}
MODEL_EXAMPLE: dict[str, Any] = {
    "id": "smollm2",
    "object": "model",
    "created": 1795434757,
    "owned_by": "vllm",
    "root": "/models/smollm2",
    "parent": None,
    "max_model_len": 2048,
}


class ModelCard(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [MODEL_EXAMPLE]})
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    root: str | None = None
    parent: str | None = Field(None, description="For a LoRA adapter: the model it runs on.")
    max_model_len: int | None = None


class ModelList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"object": "list", "data": [MODEL_EXAMPLE]}]}
    )
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIErrorInfo(BaseModel):
    message: str
    type: str = Field(description="The status's name: `BadRequestError`, `NotFoundError`, ...")
    param: str | None = Field(None, description="The request field at fault, if one is.")
    code: int = Field(description="The HTTP status.")


class OpenAIErrorResponse(BaseModel):
    error: OpenAIErrorInfo


OPENAI_REQUEST_SCHEMAS = ("CompletionRequest", "ChatCompletionRequest", "ResponsesRequest")
"""Components the generating routes' bodies refer to (vLLM's models, added to the document)."""
OPENAI_RESPONSE_SCHEMAS = ("CompletionResponse", "ChatCompletionResponse", "ResponsesResponse")
