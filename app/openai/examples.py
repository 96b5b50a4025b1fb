"""OpenAPI documentation of the v1 routes: request examples, responses, error bodies."""

from __future__ import annotations

from typing import Any

from app.openai.schemas import (
    CHAT_EXAMPLE,
    COMPLETION_EXAMPLE,
    RESPONSE_EXAMPLE,
    OpenAIErrorResponse,
)


def error_example(
    description: str, status: int, kind: str, message: str, param: str | None = None
) -> dict[str, Any]:
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return {
        "model": OpenAIErrorResponse,
        "description": description,
        "content": {"application/json": {"example": body}},
    }


CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}
"""The JSON schema of the structured-output examples (chat's and the Responses API's)."""

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: error_example(
        "Unknown model", 404, "NotFoundError", "The model `other` does not exist.", "model"
    )
}

ERRORS: dict[int | str, dict[str, Any]] = {
    400: error_example(
        "Invalid body (`param` names the field)",
        400,
        "BadRequestError",
        "max_tokens: Input should be a valid integer",
        "max_tokens",
    ),
    401: error_example(
        "Missing or wrong API key", 401, "UnauthorizedError", "missing or invalid API key"
    ),
    **NOT_FOUND,
    503: error_example(
        "Model not ready, overloaded (with Retry-After) or shutting down",
        503,
        "ServiceUnavailableError",
        "Model 'smollm2' is overloaded: 64 requests pending; retry later",
    ),
}


def request_body(schema: str, examples: dict[str, dict[str, Any]]) -> dict[str, Any]:
    content = {"schema": {"$ref": f"#/components/schemas/{schema}"}, "examples": examples}
    return {"requestBody": {"required": True, "content": {"application/json": content}}}


def example(summary: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"summary": summary, "value": value}


COMPLETION_BODY = request_body(
    "CompletionRequest",
    {
        "greedy": example(
            "Greedy, 32 new tokens",
            {
                "model": "smollm2",
                "prompt": "The capital of France is",
                "max_tokens": 32,
                "temperature": 0,
            },
        ),
        "stream": example(
            "Stream, with the usage at the end",
            {
                "model": "smollm2",
                "prompt": "Once upon a time",
                "max_tokens": 32,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
        "n_logprobs": example(
            "Two completions with the top-2 log probabilities",
            {
                "model": "smollm2",
                "prompt": "1, 2, 3,",
                "max_tokens": 8,
                "n": 2,
                "temperature": 0.8,
                "seed": 1,
                "logprobs": 2,
            },
        ),
    },
)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

CHAT_BODY = request_body(
    "ChatCompletionRequest",
    {
        "chat": example(
            "A conversation",
            {
                "model": "smollm2",
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
                "max_tokens": 32,
            },
        ),
        "stream": example(
            "Stream the answer",
            {
                "model": "smollm2",
                "messages": [{"role": "user", "content": "Tell me a joke"}],
                "max_tokens": 48,
                "stream": True,
            },
        ),
        "json_schema": example(
            "Structured output: JSON that matches a schema",
            {
                "model": "smollm2",
                "messages": [
                    {"role": "user", "content": "Give the largest city of Japan as JSON."}
                ],
                "max_tokens": 48,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "city",
                        "schema": CITY_SCHEMA,
                    },
                },
            },
        ),
        "tool": example(
            "Call a named function",
            {
                "model": "smollm2",
                "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
                "tools": [WEATHER_TOOL],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "max_tokens": 48,
            },
        ),
    },
)

SSE_EVENT = {
    "type": "object",
    "description": "One event: `data` is a chunk's JSON, "
    "an error's JSON, or `[DONE]` (the last one).",
    "properties": {"data": {"type": "string"}},
    "required": ["data"],
}
STREAM_CONTENT = {
    "text/event-stream": {
        "schema": SSE_EVENT,
        "example": 'data: {"id":"cmpl-1","object":"text_completion",'
        '"choices":[{"index":0,"text":" Paris"}]}\n\n'
        "data: [DONE]\n\n",
    }
}


def answer(
    schema: str,
    description: str,
    value: dict[str, Any],
    stream: dict[str, Any] = STREAM_CONTENT,
) -> dict[str, Any]:
    """A 200 answered as JSON (vLLM's response model `schema`) or as SSE with `stream: true`."""
    json_content = {"schema": {"$ref": f"#/components/schemas/{schema}"}, "example": value}
    return {
        "description": description,
        "content": {"application/json": json_content, **stream},
    }


COMPLETION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: answer(
        "CompletionResponse",
        "The completion, or its SSE chunks with `stream: true`",
        COMPLETION_EXAMPLE,
    ),
    **ERRORS,
}
CHAT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: answer(
        "ChatCompletionResponse", "The answer, or its SSE chunks with `stream: true`", CHAT_EXAMPLE
    ),
    **ERRORS,
}

RESPONSE_BODY = request_body(
    "ResponsesRequest",
    {
        "input": example(
            "Answer an input",
            {
                "model": "smollm2",
                "input": "What is the capital of France?",
                "max_output_tokens": 32,
            },
        ),
        "stream": example(
            "Stream the answer as events",
            {
                "model": "smollm2",
                "instructions": "Answer in one sentence.",
                "input": [{"role": "user", "content": "Tell me a joke"}],
                "max_output_tokens": 48,
                "stream": True,
            },
        ),
        "json_schema": example(
            "Structured output: JSON that matches a schema",
            {
                "model": "smollm2",
                "input": "Give the largest city of Japan as JSON.",
                "max_output_tokens": 48,
                "text": {
                    "format": {
                        "type": "json_schema",
                        "name": "city",
                        "schema": CITY_SCHEMA,
                    }
                },
            },
        ),
    },
)

RESPONSE_STREAM_CONTENT = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "description": "One event: `event` is its type (`response.created`, "
            "`response.output_text.delta`, ..., `response.completed`, or `error`), `data` "
            "its JSON. There is no `[DONE]`.",
            "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
            "required": ["event", "data"],
        },
        "example": "event: response.created\n"
        'data: {"type":"response.created","sequence_number":0,"response":{...}}\n\n'
        "event: response.output_text.delta\n"
        'data: {"type":"response.output_text.delta","delta":" Paris","sequence_number":4,...}'
        "\n\n"
        "event: response.completed\n"
        'data: {"type":"response.completed","sequence_number":9,"response":{...}}\n\n',
    }
}

RESPONSE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: answer(
        "ResponsesResponse",
        "The response, or its SSE events with `stream: true`",
        RESPONSE_EXAMPLE,
        RESPONSE_STREAM_CONTENT,
    ),
    **ERRORS,
}
