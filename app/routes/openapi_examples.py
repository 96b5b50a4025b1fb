"""OpenAPI documentation of the routes: request and response examples, error bodies."""

from __future__ import annotations

from typing import Any

from app.schemas.generate import ErrorResponse

MODEL = {"model_name": "smollm2", "model_version": "1"}


def error_response(description: str, message: str) -> dict[str, Any]:
    return {
        "model": ErrorResponse,
        "description": description,
        "content": {"application/json": {"example": {"error": message}}},
    }


NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: error_response(
        "Unknown model or version", "Request for unknown model: 'other' is not found"
    )
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: error_response(
        "Invalid request body or parameters (the message names the field)",
        "parameters.temperature: Input should be greater than or equal to 0",
    ),
    **NOT_FOUND,
    503: error_response("Model unavailable", "Model is unavailable due to unhealthy vLLM engine"),
}


def request_body(examples: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`openapi_extra` for a route that reads `GenerateRequest` itself (not as a FastAPI param)."""
    content = {"schema": {"$ref": "#/components/schemas/GenerateRequest"}, "examples": examples}
    return {"requestBody": {"required": True, "content": {"application/json": content}}}


GENERATE_REQUEST_BODY = request_body(
    {
        "prompt": {
            "summary": "A prompt, greedy, 32 new tokens",
            "value": {
                "text_input": "What is Triton Inference Server?",
                "parameters": {"stream": False, "temperature": 0, "max_tokens": 32},
            },
        },
        "outputs": {
            "summary": "Only the new text, with finish reason and token counts",
            "value": {
                "text_input": "Write a haiku about GPUs.",
                "exclude_input_in_output": True,
                "return_finish_reason": True,
                "return_num_input_tokens": True,
                "return_num_output_tokens": True,
                "parameters": {"max_tokens": 32, "temperature": 0.7, "seed": 1},
            },
        },
        "sampling_parameters": {
            "summary": "Parameters as a JSON string (replaces `parameters`), "
            "as the backend reads it",
            "value": {
                "text_input": "Name three colours.",
                "sampling_parameters": '{"max_tokens": 24, "stop": ["\\n\\n"]}',
            },
        },
    }
)

STREAM_REQUEST_BODY = request_body(
    {
        "prompt": {
            "summary": "Stream up to 32 new tokens",
            "value": {"text_input": "Tell me a joke", "parameters": {"max_tokens": 32}},
        },
        "outputs": {
            "summary": "With finish reason and the tokens of each event",
            "value": {
                "text_input": "Tell me a joke",
                "return_finish_reason": True,
                "return_num_output_tokens": True,
                "parameters": {"max_tokens": 32, "temperature": 0.7},
            },
        },
    }
)

GENERATE_RESPONSE = {
    "description": "The whole answer (with the prompt in front unless `exclude_input_in_output`)",
    "content": {
        "application/json": {
            "example": {
                **MODEL,
                "text_output": "What is Triton Inference Server?Triton Inference Server is an "
                "open-source inference serving software.",
            }
        }
    },
}

STREAM_RESPONSE = {
    "description": "One `data: {json}` event per engine step with only the new text; an error "
    'after the first event is a last `data: {"error": ...}` event',
    "content": {
        "text/event-stream": {
            "schema": {"type": "string"},
            "example": 'data: {"model_name":"smollm2","model_version":"1","text_output":"Why"}\n\n'
            'data: {"model_name":"smollm2","model_version":"1","text_output":" did"}\n\n',
        }
    },
}

EVENT_SOURCE_RESPONSE = {
    "description": "The events of the POST route, then `event: end`. Errors are `event: error` "
    'with `{"error": ...}`: after the first event always; before it (bad parameters, unknown '
    "model) when the request's Accept names `text/event-stream`, as an EventSource does (it "
    "cannot read a 4xx body), otherwise as the JSON error below with its status.",
    "content": {
        "text/event-stream": {
            "schema": {"type": "string"},
            "examples": {
                "stream": {
                    "summary": "Tokens, then the end event",
                    "value": 'data: {"model_name":"smollm2","model_version":"1",'
                    '"text_output":"Why"}\n\n'
                    'data: {"model_name":"smollm2","model_version":"1","text_output":" did"}\n\n'
                    "event: end\ndata: {}\n\n",
                },
                "error": {
                    "summary": "An error (e.g. a bad parameter, for an EventSource)",
                    "value": 'event: error\ndata: {"error":"max_tokens: Input should be greater '
                    'than or equal to 1"}\n\n',
                },
            },
        }
    },
}

QUERY_EXAMPLES = {"text_input": "Tell me a joke", "max_tokens": 32}
"""Values Swagger UI fills in for "Try it out" on the GET stream."""

EVENT_SOURCE_DESCRIPTION = """\
For browsers: `EventSource` can only send GET. The query string is read as the POST body
(same schema, same checks): each parameter is a top-level key, sampling parameters included
(`?text_input=Hi&max_tokens=32&temperature=0.7`); a repeated parameter is a list
(`stop=a&stop=b`); only the parameters below are taken: other vLLM parameters and anything
nested go into `sampling_parameters` as a JSON object. `api_key` carries the API key when the
server requires one.

```js
const es = new EventSource('/v2/models/smollm2/generate_stream?text_input=Hi&max_tokens=32');
es.onmessage = (e) => console.log(JSON.parse(e.data).text_output);
es.addEventListener('end', () => es.close());
es.addEventListener('error', (e) => {
  if (e.data) console.error(JSON.parse(e.data).error);
  es.close();
});
```
"""


READY_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "Ready (empty body)"},
    503: {"description": "Not ready (empty body)"},
}

MODEL_CONFIG_RESPONSE = {
    "description": "The model configuration as Triton completes it for the vLLM backend",
    "content": {
        "application/json": {
            "example": {
                "name": "smollm2",
                "backend": "vllm",
                "max_batch_size": 0,
                "model_transaction_policy": {"decoupled": True},
                "input": [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}],
                "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}],
                "instance_group": [{"count": 1, "kind": "KIND_MODEL"}],
                "parameters": {"APPLY_CHAT_TEMPLATE": {"string_value": "true"}},
            }
        }
    },
}

INDEX_REQUEST_BODY = {
    "requestBody": {
        "required": False,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/RepositoryIndexRequest"},
                "example": {"ready": True},
            }
        },
    }
}

METRICS_RESPONSE = {
    "description": "Prometheus text exposition",
    "content": {
        "text/plain": {
            "schema": {"type": "string"},
            "example": "# TYPE vllm:generation_tokens_total counter\n"
            'vllm:generation_tokens_total{model="smollm2",version="1"} 4096.0\n'
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model="smollm2",version="1"} 2.0\n',
        }
    },
}
