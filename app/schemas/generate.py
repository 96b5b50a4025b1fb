"""Request and response bodies of Triton's generate extension, as the vLLM backend reads them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

StopValue = StrictStr | list[StrictStr]
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1
TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
StructuredOutputs = dict[str, Any] | StrictStr
ENGINE_MAX_TOKENS = 16
"""vLLM's `SamplingParams` default: the new tokens a request that sets none asks."""


class RepetitionDetection(BaseModel):
    """vLLM's `RepetitionDetectionParams`: the output ends once its last pattern of
    `min_pattern_size` to `max_pattern_size` tokens stands `min_count` times in a row."""

    model_config = ConfigDict(extra="forbid")

    max_pattern_size: int = Field(
        0, ge=0, le=INT32_MAX, description="0: off; at most MAX_REPETITION_PATTERN."
    )
    min_pattern_size: int = Field(0, ge=0, le=INT32_MAX)
    min_count: int = Field(0, ge=0, le=INT32_MAX)


class SamplingParameters(BaseModel):
    """vLLM `SamplingParams` fields, plus the backend's own `stream` and `lora_name`.

    Fields not listed here are passed to `SamplingParams` when vLLM knows them.
    """

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    stream: bool | None = Field(None, description="Stream responses (generate_stream only).")
    lora_name: StrictStr | None = Field(None, description="LoRA adapter from multi_lora.json.")
    apply_chat_template: bool | None = Field(
        None, description="Wrap text_input in the model's chat template (default: per model)."
    )
    priority: int | None = Field(
        None,
        ge=0,
        le=UINT64_MAX,
        description="Triton's request priority (0: the default); the engine's queue order "
        "where model.json sets scheduling_policy: priority (lower values first).",
    )
    timeout: int | None = Field(
        None,
        ge=0,
        le=UINT64_MAX,
        description="Triton's request timeout in microseconds (0: none): the request ends "
        "with a 504 once it runs longer (REQUEST_TIMEOUT_SECONDS bounds it too).",
    )
    max_tokens: int | None = Field(
        None,
        ge=1,
        le=INT32_MAX,
        description=f"New tokens at most (vLLM: {ENGINE_MAX_TOKENS}, or MAX_TOKENS_LIMIT if "
        "lower).",
    )
    min_tokens: int | None = Field(None, ge=0, le=INT32_MAX)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, le=INT32_MAX)
    min_p: float | None = Field(None, ge=0, le=1)
    n: int | None = Field(None, ge=1, le=INT32_MAX, description="Number of completions.")
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    stop: StopValue | None = None
    stop_token_ids: list[TokenId] | None = None
    ignore_eos: bool | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    logprobs: int | None = Field(
        None, ge=0, le=INT32_MAX, description="Top log-probabilities per token."
    )
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, gt=0)
    structured_outputs: StructuredOutputs | None = Field(
        None, description="vLLM StructuredOutputsParams (json, regex, choice, grammar)."
    )
    guided_decoding: StructuredOutputs | None = Field(
        None, description="Older name of structured_outputs, as the backend accepts it."
    )
    repetition_detection: RepetitionDetection | None = Field(
        None, description="End the output once a pattern of tokens repeats."
    )


class GenerateRequest(BaseModel):
    """The body of `generate` and `generate_stream`.

    Top-level keys that are not inputs of the backend are taken as parameters, as Triton does.
    """

    model_config = ConfigDict(
        extra="allow",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "text_input": "What is Triton Inference Server?",
                    "parameters": {"stream": False, "temperature": 0, "max_tokens": 32},
                }
            ]
        },
    )

    text_input: StrictStr = Field(description="The prompt.")
    image: list[StrictStr] | StrictStr | None = Field(
        None, description="Base64-encoded images, for multimodal models."
    )
    stream: StrictBool | None = None
    sampling_parameters: StrictStr | None = Field(
        None, description="Sampling parameters as a JSON string; replaces `parameters`."
    )
    exclude_input_in_output: StrictBool | None = None
    return_finish_reason: StrictBool | None = None
    return_cumulative_logprob: StrictBool | None = None
    return_logprobs: StrictBool | None = None
    return_num_input_tokens: StrictBool | None = None
    return_num_output_tokens: StrictBool | None = None
    parameters: SamplingParameters | None = None


class GenerateResponse(BaseModel):
    """One response (or one stream event). With `n > 1` the per-completion fields are lists."""

    model_name: str
    model_version: str
    text_output: str | list[str]
    finish_reason: str | list[str | None] | None = Field(
        None, description="Why generation stopped ('stop', 'length', ...); null while running."
    )
    cumulative_logprob: float | list[float | None] | None = None
    logprobs: str | list[str] | None = Field(
        None,
        description="JSON text: per new token, {token_id: {logprob, rank, decoded_token}}.",
    )
    num_input_tokens: int | None = None
    num_output_tokens: int | list[int] | None = Field(
        None, description="Tokens generated in this response."
    )


class ErrorResponse(BaseModel):
    """Triton's error body."""

    error: str
