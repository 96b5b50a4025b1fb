"""The OpenAI wire formats as the API docs show them: the main fields of each body. vLLM's own
protocol models read and write the bodies (every field vLLM's server takes is accepted)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

OPEN = ConfigDict(extra="allow")

Stop = str | list[str] | None


class StreamOptions(BaseModel):
    model_config = OPEN
    include_usage: bool | None = Field(None, description="End the stream with a chunk holding `usage`.")
    continuous_usage_stats: bool | None = Field(None, description="vLLM: `usage` in every chunk.")


class ResponseFormat(BaseModel):
    model_config = OPEN
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: dict[str, Any] | None = Field(None, description="`{name, schema, strict}` for `json_schema`.")


class SamplingFields(BaseModel):
    """Fields both generating routes take (and vLLM's extra sampling parameters: `top_k`,
    `min_p`, `repetition_penalty`, `ignore_eos`, `min_tokens`, `stop_token_ids`,
    `structured_outputs`, ...)."""

    model_config = OPEN
    model: str | None = Field(
        None,
        description="`<model>`, `<model>/<version>`, or a LoRA adapter's id (see GET /v1/models); "
        "optional when the server serves one model.",
    )
    max_tokens: int | None = Field(None, description="New tokens at most (completions: 16 by default).")
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = Field(None, description="Completions per prompt.")
    stream: bool | None = Field(None, description="Answer as Server-Sent Events, ending with `data: [DONE]`.")
    stream_options: StreamOptions | None = None
    stop: Stop = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None


class CompletionRequest(SamplingFields):
    """`POST /v1/completions`."""

    prompt: str | list[str] | list[int] | list[list[int]] = Field(description="Text, texts, or token ids.")
    logprobs: int | None = Field(None, description="Log probabilities of this many top tokens per position.")
    echo: bool | None = None
    suffix: str | None = None
    response_format: ResponseFormat | None = None


class ChatMessage(BaseModel):
    model_config = OPEN
    role: str = Field(description="`system`, `user`, `assistant`, `tool`, ...")
    content: str | list[dict[str, Any]] | None = None


class Tool(BaseModel):
    model_config = OPEN
    type: Literal["function"] = "function"
    function: dict[str, Any] = Field(description="`{name, description, parameters, strict}`.")


class ChatCompletionRequest(SamplingFields):
    """`POST /v1/chat/completions`: messages rendered with the model's chat template."""

    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = Field(
        None, description="`none`, `auto`, `required` or `{type: function, function: {name}}`."
    )
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class Usage(BaseModel):
    model_config = OPEN
    prompt_tokens: int
    completion_tokens: int | None = None
    total_tokens: int


class CompletionChoice(BaseModel):
    model_config = OPEN
    index: int
    text: str
    finish_reason: str | None = None


COMPLETION_EXAMPLE = {
    "id": "cmpl-5e7c6260c37f4d7f",
    "object": "text_completion",
    "created": 1795434763,
    "model": "smollm2",
    "choices": [{"index": 0, "text": " Paris.\n\nThe answer is:", "logprobs": None, "finish_reason": "length"}],
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
            "message": {"role": "assistant", "content": "The capital of France is Paris.", "tool_calls": []},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 37, "completion_tokens": 8, "total_tokens": 45},
}
MODEL_EXAMPLE = {
    "id": "smollm2",
    "object": "model",
    "created": 1795434757,
    "owned_by": "vllm",
    "root": "/models/smollm2",
    "parent": None,
    "max_model_len": 2048,
}


class CompletionResponse(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [COMPLETION_EXAMPLE]})
    id: str
    object: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ChatChoice(BaseModel):
    model_config = OPEN
    index: int
    message: dict[str, Any] = Field(description="`{role, content, tool_calls, reasoning}`.")
    finish_reason: str | None = None


class ChatCompletionResponse(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [CHAT_EXAMPLE]})
    id: str
    object: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None


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
    model_config = ConfigDict(json_schema_extra={"examples": [{"object": "list", "data": [MODEL_EXAMPLE]}]})
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIErrorInfo(BaseModel):
    message: str
    type: str = Field(description="The status's name: `BadRequestError`, `NotFoundError`, ...")
    param: str | None = Field(None, description="The request field at fault, if one is.")
    code: int = Field(description="The HTTP status.")


class OpenAIErrorResponse(BaseModel):
    error: OpenAIErrorInfo


DOCUMENTED_MODELS = (CompletionRequest, ChatCompletionRequest)
"""Request bodies the routes read by hand, published in the OpenAPI components."""
