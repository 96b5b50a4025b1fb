"""The OpenAPI schemas of the OpenAI routes, from the models that read and write them: vLLM's
own request and response models (app/engine/vllm_openai/serving.py validates every body with
them), so the documentation, clients generated from it and the fuzz tier see exactly what
the server accepts."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from app.engine.vllm_openai.compat import (
    ChatCompletionRequest,
    CompletionRequest,
    ResponsesRequest,
    ResponsesResponse,
)

try:  # 0.32
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse
    from vllm.entrypoints.openai.completion.protocol import CompletionResponse
except ImportError:  # pragma: no cover - 0.25
    from vllm.entrypoints.openai.protocol import (  # type: ignore[no-redef]
        ChatCompletionResponse,
        CompletionResponse,
    )

REF_PREFIX = "#/components/schemas/"
PREFIX = "vllm."
"""Put before the name of a vLLM schema whose name another component already has."""
REQUESTS: tuple[type[BaseModel], ...] = (CompletionRequest, ChatCompletionRequest, ResponsesRequest)
RESPONSES: tuple[type[BaseModel], ...] = (
    CompletionResponse,
    ChatCompletionResponse,
    ResponsesResponse,
)


def openai_components(taken: Iterable[str] = ()) -> dict[str, dict[str, Any]]:
    """OpenAPI components: `CompletionRequest`, `ChatCompletionRequest`, `ResponsesRequest`
    (as vLLM validates them), `CompletionResponse`, `ChatCompletionResponse`,
    `ResponsesResponse` (as vLLM writes them) and the schemas they refer to; one whose name is
    in `taken` is renamed `vllm.<name>`."""
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (model, "validation") for model in REQUESTS
    ]
    models += [(model, "serialization") for model in RESPONSES]
    _, schema = models_json_schema(models, ref_template=REF_PREFIX + "{model}")
    defs: dict[str, dict[str, Any]] = schema.get("$defs", {})
    own = {model.__name__ for model in REQUESTS + RESPONSES}
    renamed = {name: PREFIX + name for name in defs if name in set(taken) and name not in own}
    return {
        renamed.get(name, name): with_refs_renamed(value, renamed) for name, value in defs.items()
    }


def with_refs_renamed(schema: dict[str, Any], renamed: dict[str, str]) -> dict[str, Any]:
    """`schema` with its references to renamed components following them."""
    if not renamed:
        return schema
    text = json.dumps(schema)
    for old, new in renamed.items():
        text = text.replace(json.dumps(REF_PREFIX + old), json.dumps(REF_PREFIX + new))
    return json.loads(text)  # type: ignore[no-any-return]
