"""OpenAPI examples of vLLM's utility routes (app/openai/utility.py): request bodies, answers
and errors in vLLM's shape."""

from __future__ import annotations

from typing import Any

from app.openai.errors import error_type


def openai_error(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """A documented error in vLLM's shape."""
    example = {"message": message, "type": error_type(status), "param": param, "code": status}
    return {
        "description": message,
        "content": {"application/json": {"example": {"error": example}}},
    }


def json_answer(description: str, example: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    return {
        200: {"description": description, "content": {"application/json": {"example": example}}}
    }


def text_answer(description: str, example: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"description": description, "content": {"text/plain": {"example": example}}}}


TOKENIZE_BODY = {
    "requestBody": {
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "vLLM's TokenizeRequest: a prompt, or chat messages",
                },
                "example": {"model": "smollm2", "prompt": "Hello world", "return_token_strs": True},
            }
        }
    }
}
DETOKENIZE_BODY = {
    "requestBody": {
        "content": {
            "application/json": {
                "schema": {"type": "object", "description": "vLLM's DetokenizeRequest"},
                "example": {"model": "smollm2", "tokens": [19556, 905]},
            }
        }
    }
}
LOAD_BODY = {
    "requestBody": {
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "description": "vLLM's LoadLoRAAdapterRequest (and `model`)",
                },
                "example": {
                    "model": "smollm2",
                    "lora_name": "sql",
                    "lora_path": "smollm2/adapters/sql",
                },
            }
        }
    }
}
VERSION_RESPONSES = json_answer("vLLM's version", {"version": "0.32.0"})
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: openai_error(404, "The model `nope` does not exist.", "model")
}
TOKENIZE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **json_answer(
        "The token ids (and their strings with return_token_strs)",
        {
            "count": 3,
            "max_model_len": 2048,
            "tokens": [19556, 905, 30],
            "token_strs": ["Hello", "Ġworld", "!"],
        },
    ),
    400: openai_error(400, "prompt: Field required", "prompt"),
    **NOT_FOUND,
}
DETOKENIZE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **json_answer("The text of the token ids", {"prompt": "Hello world!"}),
    400: openai_error(400, "tokens: Input should be a valid list", "tokens"),
    **NOT_FOUND,
}
LORA_REFUSED: dict[int | str, dict[str, Any]] = {
    501: openai_error(501, "runtime LoRA adapters need FRONTEND_PROCESSES=1")
}
LOAD_RESPONSES = {
    **text_answer("Loaded", "Success: LoRA adapter 'sql' added successfully."),
    400: openai_error(
        400, "lora_path: must be an adapter folder inside a model repository", "lora_path"
    ),
}
UNLOAD_RESPONSES = {
    **text_answer("Unloaded", "Success: LoRA adapter 'sql' removed successfully."),
    404: openai_error(404, "The lora adapter 'sql' cannot be found.", "lora_name"),
}
