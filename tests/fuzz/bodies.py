"""Requests of each inference route built from the edge-value strategies: (route name as the
report counts it, HTTP method, path, keyword arguments for `requests`)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.strategies import (
    EDGE_INTEGERS,
    EDGE_TEXT,
    PROMPTS,
    json_schemas,
    sampling_values,
    structured_outputs,
)

Request = tuple[str, str, str, dict[str, Any]]
GENERATE = "POST /v2/models/{model_name}/generate"
GENERATE_STREAM = "POST /v2/models/{model_name}/generate_stream"
EVENT_SOURCE = "GET /v2/models/{model_name}/generate_stream"
COMPLETIONS = "POST /v1/completions"
CHAT = "POST /v1/chat/completions"
ROUTES = (GENERATE, GENERATE_STREAM, EVENT_SOURCE, COMPLETIONS, CHAT)
"""The inference routes of every served model (the real engine's phase fuzzes these)."""
VERSIONED = "/v2/models/{model_name}/versions/{model_version}/"
VERSIONED_ROUTES = tuple(
    route.replace("/v2/models/{model_name}/", VERSIONED) for route in ROUTES if "/v2/" in route
)
"""The same Triton routes naming a version: FUZZ_EXAMPLES inputs each on the double too."""
INFERENCE_ROUTES = ROUTES + VERSIONED_ROUTES
VERSION = "1"


def models(model: str) -> st.SearchStrategy[str]:
    return st.sampled_from([model, model, model, f"{model}/1", "other", "", "a" * 300])


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


def with_grammar(values: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Sampling values (none in a third of the requests), a third of them with a
    structured-output constraint."""
    values = st.one_of(st.just({}), values, values)
    grammar = st.one_of(
        st.just({}),
        st.just({}),
        st.fixed_dictionaries({"structured_outputs": structured_outputs()}),
    )
    return st.tuples(values, grammar).map(lambda pair: {**pair[0], **pair[1]})


def model_path(route: str, model: str) -> str:
    """The route's path for `model` (and VERSION where the route names a version)."""
    return route.split(" ", 1)[1].format(model_name=model, model_version=VERSION)


def triton(route: str, model: str) -> st.SearchStrategy[Request]:
    path = model_path(route, model)
    body = st.fixed_dictionaries(
        {"text_input": st.one_of(PROMPTS, EDGE_TEXT), "parameters": with_grammar(sampling_values())}
    )
    return st.tuples(body, FLAGS).map(
        lambda pair: (route, "POST", path, {"json": {**pair[0], **pair[1]}})
    )


def event_source(route: str, model: str) -> st.SearchStrategy[Request]:
    def query(pair: tuple[str, dict[str, Any]]) -> Request:
        text, values = pair
        params = {
            key: value if isinstance(value, str) else json.dumps(value)
            for key, value in values.items()
        }
        path = model_path(route, model)
        return route, "GET", path, {"params": {"text_input": text, **params}}

    return st.tuples(EDGE_TEXT, with_grammar(sampling_values())).map(query)


RESPONSE_FORMATS = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "other"])}),
    st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": st.fixed_dictionaries({"name": st.just("x"), "schema": json_schemas()}),
        }
    ),
)


def openai(route: str, model: str) -> st.SearchStrategy[Request]:
    prompt: st.SearchStrategy[Any]
    if route == COMPLETIONS:
        prompt = st.one_of(
            PROMPTS, EDGE_TEXT, st.lists(EDGE_TEXT, max_size=3), st.lists(EDGE_INTEGERS, max_size=4)
        )
        field = "prompt"
    else:
        message = st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "system", "assistant", "tool", "x"]),
                "content": st.one_of(PROMPTS, EDGE_TEXT),
            }
        )
        prompt, field = st.lists(message, min_size=1, max_size=3), "messages"
    extra: st.SearchStrategy[dict[str, Any]] = st.one_of(
        st.just({}), st.fixed_dictionaries({"response_format": RESPONSE_FORMATS})
    )
    body = st.tuples(models(model), prompt, with_grammar(sampling_values()), extra, st.booleans())
    path = "/v1/" + ("completions" if route == COMPLETIONS else "chat/completions")
    return body.map(
        lambda parts: (
            route,
            "POST",
            path,
            {
                "json": {
                    "model": parts[0],
                    field: parts[1],
                    **parts[2],
                    **parts[3],
                    "stream": parts[4],
                }
            },
        )
    )


def requests_of(route: str, model: str = "fake") -> st.SearchStrategy[Request]:
    if route.startswith("GET "):
        return event_source(route, model)
    if "/v2/" in route:
        return triton(route, model)
    return openai(route, model)
