"""Requests of each inference route: well-typed edge values (half of them) and the families
that once stalled or killed the server (tests/fuzz/families.py, a sixth each); a quarter of
the requests of the routes that stream both ways come with their twin, the same body in the
other streaming mode, whose answer must be of the same kind."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from app.routes.query import query_fields
from tests.fuzz.families import (
    HUGE_GRAMMARS,
    LONG_LIST_SAMPLING,
    LONG_TEXTS,
    SURROGATE_SAMPLING,
    SURROGATE_TEXTS,
    VLLM_GRAMMARS,
    grammar,
)
from tests.fuzz.mixing import (
    CHAT,
    COMPLETIONS,
    EDGE_VALUES,
    GENERATE,
    GENERATE_STREAM,
    INFERENCE_ROUTES,
    RESPONSES,
    ROUTES,
    VERSIONED_ROUTES,
    Families,
    Fields,
    Request,
    mixed,
    model_path,
    weighted,
    with_grammar,
)
from tests.fuzz.openai_bodies import openai
from tests.fuzz.responses_bodies import responses
from tests.fuzz.strategies import EDGE_TEXT, PROMPTS, sampling_values

__all__ = ["INFERENCE_ROUTES", "ROUTES", "Request", "requests_of"]

FLAGS = st.dictionaries(
    st.sampled_from(
        [
            "exclude_input_in_output",
            "return_finish_reason",
            "return_cumulative_logprob",
            "return_logprobs",
            "return_num_input_tokens",
            "return_num_output_tokens",
            "stream",
        ]
    ),
    st.booleans(),
    max_size=4,
)


def triton_families() -> Families:
    """Body fields of Triton's generate routes for each family (long lists, grammars, lone
    surrogates)."""
    long_lists = st.fixed_dictionaries(
        {"text_input": st.one_of(PROMPTS, LONG_TEXTS), "parameters": LONG_LIST_SAMPLING}
    )
    grammars = st.fixed_dictionaries({"text_input": PROMPTS, "parameters": VLLM_GRAMMARS})
    surrogates = st.one_of(
        st.fixed_dictionaries({"text_input": SURROGATE_TEXTS}),
        st.fixed_dictionaries({"text_input": PROMPTS, "parameters": SURROGATE_SAMPLING}),
        st.builds(lambda text: {"text_input": "Hi", "parameters": {"lora_name": text}},
                  SURROGATE_TEXTS),
        st.builds(lambda values: {"text_input": "Hi", "sampling_parameters": json.dumps(values)},
                  SURROGATE_SAMPLING),
    )  # fmt: skip
    return long_lists, grammars, surrogates


def triton(route: str, model: str, only: str | None) -> st.SearchStrategy[Request]:
    path = model_path(route, model)

    def build(drawn: tuple[Fields, dict[str, Any]]) -> Request:
        (family, fields, refused), flags = drawn
        body = {**fields, **flags}
        return Request(route, "POST", path, body, family=family, refused=refused)

    edge = st.fixed_dictionaries(
        {"text_input": st.one_of(PROMPTS, EDGE_TEXT), "parameters": with_grammar(sampling_values())}
    )
    return st.tuples(mixed(edge, *triton_families(), only=only), FLAGS).map(build)


TYPED_IN_QUERY = query_fields()


def event_source(route: str, model: str, only: str | None) -> st.SearchStrategy[Request]:
    """Edge values as query parameters (JSON text where not strings, names the query does not
    take among them); the families' fields as the query takes them: the typed ones as
    parameters (lists repeated, objects as JSON text), the others in `sampling_parameters`."""
    path = model_path(route, model)

    def edge(pair: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        text, values = pair
        params = {
            key: value if isinstance(value, str) else json.dumps(value)
            for key, value in values.items()
        }
        return {"text_input": text, **params}

    def build(drawn: Fields) -> Request:
        family, fields, refused = drawn
        if family == EDGE_VALUES:
            return Request(route, "GET", path, query=fields)
        query = as_query(fields)
        # a lone surrogate in JSON text is refused; one in the URL's own text is its UTF-8
        # bytes, which the server reads as replacement characters
        raw = any(not encodable(text) for text in strings_of(query))
        return Request(route, "GET", path, query=query, family=family, refused=refused and not raw)

    edge_values = st.tuples(EDGE_TEXT, with_grammar(sampling_values())).map(edge)
    return mixed(edge_values, *triton_families(), only=only).map(build).map(capped)


MAX_QUERY_BYTES = 256 * 1024
"""About the longest query string sent: servers refuse a tenth of it (431), and a client
takes seconds to build and parse a URL of megabytes."""


def capped(request: Request) -> Request:
    """`request` with the strings of a query over MAX_QUERY_BYTES cut short (JSON text cut
    is no longer JSON: a 400 still)."""
    assert request.query is not None
    strings = strings_of(request.query)
    if sum(map(len, strings)) <= MAX_QUERY_BYTES // 12:  # 12 bytes a character at most
        return request
    cut = MAX_QUERY_BYTES // (12 * len(strings))
    query = {
        key: [item[:cut] if isinstance(item, str) else item for item in value]
        if isinstance(value, list)
        else value[:cut]
        if isinstance(value, str)
        else value
        for key, value in request.query.items()
    }
    return replace(request, query=query)


def as_query(fields: dict[str, Any]) -> dict[str, Any]:
    """A Triton body's fields as the GET stream's query parameters."""
    query = {key: value for key, value in fields.items() if key != "parameters"}
    untyped = {}
    for key, value in fields.get("parameters", {}).items():
        if key not in TYPED_IN_QUERY:
            untyped[key] = value
        elif isinstance(value, list):
            query[key] = [item if isinstance(item, str) else json.dumps(item) for item in value]
        else:
            query[key] = value if isinstance(value, str) else json.dumps(value)
    if untyped:
        query["sampling_parameters"] = json.dumps(untyped)
    return query


def strings_of(query: dict[str, Any]) -> list[str]:
    return [
        text
        for value in query.values()
        for text in (value if isinstance(value, list) else [value])
        if isinstance(text, str)
    ]


def encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


STREAMED_TWINS = {GENERATE: GENERATE_STREAM, GENERATE_STREAM: GENERATE}
TWINNED = frozenset(
    {
        *STREAMED_TWINS,
        COMPLETIONS,
        CHAT,
        RESPONSES,
        *(route for route in VERSIONED_ROUTES if route.startswith("POST")),
    }
)
"""Routes whose requests come with a twin in the other streaming mode now and then."""


ONE_MODE_ONLY = frozenset({"stream", "exclude_input_in_output"})


def with_twin(request: Request) -> Request:
    """`request` and its twin: the same body streamed if it was not, and not if it was (on
    Triton, the other route). Neither says what only one mode takes: `stream`, Triton's
    `exclude_input_in_output` (false is refused when streaming), OpenAI's `stream_options`."""
    assert request.body is not None
    body = {key: value for key, value in request.body.items() if key not in ONE_MODE_ONLY}
    if request.route.startswith("POST /v1/"):
        body.pop("stream_options", None)
        first = replace(request, body={**body, "stream": False})
        return replace(first, twin=replace(first, body={**body, "stream": True}))
    stream = request.route.endswith("generate_stream")
    other = request.route[: -len("_stream")] if stream else request.route + "_stream"
    path = request.path[: -len("_stream")] if stream else request.path + "_stream"
    first = replace(request, body=body)
    return replace(first, twin=replace(first, route=other, path=path))


def requests_of(
    route: str, model: str = "fake", only: str | None = None
) -> st.SearchStrategy[Request]:
    """The route's requests (`only`: of that family); a quarter of them twinned where the
    route streams both ways."""
    if route.startswith("GET "):
        return event_source(route, model, only)
    if "/v2/" in route:
        drawn = triton(route, model, only)
    elif route == RESPONSES:
        drawn = responses(model, only)
    else:
        drawn = openai(route, model, only)
    if route not in TWINNED:
        return drawn
    return weighted(drawn, drawn, drawn, drawn.map(with_twin))


def once_broke_the_server(model: str) -> list[Request]:
    """Requests that draws of the tier once saw answered with a 500 (twinned where the route
    streams both ways): JSON schemas 400 levels deep, which the grammar check could not
    hand to its worker, in the Responses API's `text.format` and in Triton's
    `sampling_parameters` (every route's grammars take that path)."""
    deep = grammar("nesting", "huge", "structured_outputs")
    responses_body = {"model": model, "input": "Hi", "max_output_tokens": 1}
    sampling = json.dumps({"max_tokens": 1, **deep})
    return [
        with_twin(
            Request(
                RESPONSES,
                "POST",
                "/v1/responses",
                {**responses_body, **grammar("nesting", "huge", "text")},
                family=HUGE_GRAMMARS,
            )
        ),
        Request(
            GENERATE,
            "POST",
            model_path(GENERATE, model),
            {"text_input": "Hi", "sampling_parameters": sampling},
            family=HUGE_GRAMMARS,
        ),
    ]
