"""The GET form of `generate_stream`: a `GenerateRequest` from query parameters.

Rules (the same schema as the POST body, read from strings):

- every query parameter is a top-level key of the body; keys that are not inputs of the
  backend are sampling parameters, as Triton takes unknown top-level keys;
- a parameter given more than once is a list (`stop=a&stop=b`); parameters that only take
  lists (`stop_token_ids`) are lists even when given once;
- values are read as pydantic reads a string in lax mode (`max_tokens=32`, `ignore_eos=true`,
  `temperature=0.7`); `text_input` and `stop` stay strings whatever they look like;
- only the documented parameters are taken (the fields of the body and of `parameters`, but
  `parameters` and `image`): anything else, nested values and vLLM parameters the schema does
  not type, goes into `sampling_parameters` (a JSON object, as in the body), or
  `structured_outputs` (a JSON object as text); so no untyped string reaches vLLM;
- `api_key` is the API key (an `EventSource` cannot send headers) and never part of the body.
"""

from __future__ import annotations

import re
import types
from functools import cache
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from starlette.datastructures import QueryParams

from app.errors import InvalidRequestError, did_you_mean
from app.schemas.generate import GenerateRequest, SamplingParameters
from app.schemas.validation import validate_data

API_KEY_PARAMETER = "api_key"
EVENT_SOURCE_PATH = re.compile(r"/v2/models/[^/]+(?:/versions/[^/]+)?/generate_stream")
"""The GET stream's paths: the only ones where `api_key` may stand in for the header."""
NOT_IN_QUERY = frozenset({"parameters", "image"})
"""Body fields that make no sense in a URL (objects, base64 images): not documented for GET."""


def generate_request_from_query(query: QueryParams) -> GenerateRequest:
    """Validate the query string as the body of a POST `generate_stream`, or a 400 naming the
    field."""
    lists = list_fields()
    data: dict[str, Any] = {}
    for key in dict.fromkeys(query.keys()):
        if key == API_KEY_PARAMETER:
            continue
        check_known(key)
        values = query.getlist(key)
        data[key] = values if len(values) > 1 or key in lists else values[0]
    return validate_data(GenerateRequest, data, strict=False)


@cache
def query_fields() -> frozenset[str]:
    """The parameters the query string may carry: the typed fields of the body."""
    return frozenset(
        (set(GenerateRequest.model_fields) | set(SamplingParameters.model_fields)) - NOT_IN_QUERY
    )


def check_known(key: str) -> None:
    if key in query_fields():
        return
    raise InvalidRequestError(
        f"{key}: unknown query parameter{did_you_mean(key, sorted(query_fields()))}; "
        "other vLLM parameters go in sampling_parameters (a JSON object)"
    )


@cache
def list_fields() -> frozenset[str]:
    """Fields of the body and of the sampling parameters that accept only lists."""
    names = set()
    for model in (GenerateRequest, SamplingParameters):
        for name, field in model.model_fields.items():
            options = [a for a in union_members(field.annotation) if a is not type(None)]
            if options and all(get_origin(a) is list for a in options):
                names.add(name)
    return frozenset(names)


def union_members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def query_parameters_openapi(examples: dict[str, Any]) -> list[dict[str, Any]]:
    """The OpenAPI `parameters` of the GET route, made from the same schemas as the body."""
    parameters = model_query_parameters(GenerateRequest, exclude=NOT_IN_QUERY)
    documented = NOT_IN_QUERY | {p["name"] for p in parameters}
    parameters += model_query_parameters(SamplingParameters, exclude=documented)
    parameters.append(
        {
            "name": API_KEY_PARAMETER,
            "in": "query",
            "required": False,
            "description": "The API key, when the server requires one (an EventSource cannot "
            "send `Authorization`). Never logged.",
            "schema": {"type": "string"},
        }
    )
    for parameter in parameters:
        if parameter["name"] in examples:
            parameter["example"] = examples[parameter["name"]]
    return parameters


def model_query_parameters(model: type[BaseModel], exclude: frozenset[str]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    parameters = []
    for name, prop in schema["properties"].items():
        if name in exclude:
            continue
        query_schema = query_value_schema(prop)
        if query_schema is None:
            continue
        parameter: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": query_schema,
        }
        if "description" in prop:
            parameter["description"] = prop["description"]
        options = query_schema.get("anyOf", [query_schema])
        if any(option.get("type") == "array" for option in options):
            parameter.update(style="form", explode=True)  # repeated: stop=a&stop=b
        parameters.append(parameter)
    return parameters


def query_value_schema(prop: dict[str, Any]) -> dict[str, Any] | None:
    """The property's schema without `null` (an absent parameter) and without objects (which a
    query string cannot carry); None when nothing is left."""
    options = prop.get("anyOf", [prop])
    kept = [
        {k: v for k, v in option.items() if k not in ("title", "description", "default")}
        for option in options
        if option.get("type") not in ("null", "object")
    ]
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else {"anyOf": kept}
