"""What the fuzz tier's HTTP requests are made of: the inference routes, `Request` (a body
or query, its family, whether it must be refused, its twin in the other streaming mode), and
the mix of edge values and families each route draws."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

from hypothesis import strategies as st

from tests.fuzz.families import HUGE_GRAMMARS, LONG_LISTS, SURROGATES
from tests.fuzz.strategies import structured_outputs

T = TypeVar("T")
EDGE_VALUES = "edge values"
GENERATE = "POST /v2/models/{model_name}/generate"
GENERATE_STREAM = "POST /v2/models/{model_name}/generate_stream"
EVENT_SOURCE = "GET /v2/models/{model_name}/generate_stream"
COMPLETIONS = "POST /v1/completions"
CHAT = "POST /v1/chat/completions"
RESPONSES = "POST /v1/responses"
ROUTES = (GENERATE, GENERATE_STREAM, EVENT_SOURCE, COMPLETIONS, CHAT, RESPONSES)
"""The inference routes of every served model (the real engine's phase fuzzes these)."""
VERSIONED = "/v2/models/{model_name}/versions/{model_version}/"
VERSIONED_ROUTES = tuple(
    route.replace("/v2/models/{model_name}/", VERSIONED) for route in ROUTES if "/v2/" in route
)
"""The same Triton routes naming a version: FUZZ_EXAMPLES inputs each on the double too."""
INFERENCE_ROUTES = ROUTES + VERSIONED_ROUTES
VERSION = "1"


@dataclass(frozen=True)
class Request:
    """One request: `route` as the report counts it, the body's `family`; `refused`: it must
    be a 400; `names`: the field its 4xx must name (`param` of OpenAI's error); `twin`: the
    same body in the other streaming mode."""

    route: str
    method: str
    path: str
    body: dict[str, Any] | None = None
    query: dict[str, Any] | None = None
    family: str = EDGE_VALUES
    refused: bool = False
    names: str | None = None
    twin: Request | None = None

    def url(self, base: str) -> str:
        """The URL; a query's strings as UTF-8 (lone surrogates as their bytes would be)."""
        if self.query is None:
            return base + self.path
        return f"{base}{self.path}?{urlencode(self.query, doseq=True, errors='surrogatepass')}"

    def arguments(self) -> dict[str, Any]:
        """`requests` arguments: the body as the bytes of `json.dumps` (ASCII, so that lone
        surrogates travel as JSON escapes)."""
        if self.body is None:
            return {}
        data = json.dumps(self.body, ensure_ascii=True).encode()
        return {"data": data, "headers": {"content-type": "application/json"}}

    def __repr__(self) -> str:
        shown = json.dumps(self.body if self.query is None else self.query)
        shown = shown if len(shown) < 600 else f"{shown[:600]}... ({len(shown)} characters)"
        twin = f", twin={self.twin.route}" if self.twin else ""
        return f"Request({self.route}, {self.family}, refused={self.refused}{twin}, {shown})"


def models(model: str) -> st.SearchStrategy[str]:
    return st.sampled_from([model, model, model, f"{model}/1", "other", "", "a" * 300])


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


Fields = tuple[str, dict[str, Any], bool]
"""A family's fields for one body: (family, fields, refused)."""


Families = tuple[
    st.SearchStrategy[dict[str, Any]],
    st.SearchStrategy[dict[str, Any]],
    st.SearchStrategy[dict[str, Any]],
]
"""Body fields of a route for each family: long strings in lists, huge grammars, lone
surrogates."""


def tagged(
    family: str, fields: st.SearchStrategy[dict[str, Any]], refused: bool = False
) -> st.SearchStrategy[Fields]:
    return fields.map(lambda values: (family, values, refused))


def mixed(
    edge: st.SearchStrategy[dict[str, Any]],
    long_lists: st.SearchStrategy[dict[str, Any]],
    grammars: st.SearchStrategy[dict[str, Any]],
    surrogates: st.SearchStrategy[dict[str, Any]],
    only: str | None = None,
) -> st.SearchStrategy[Fields]:
    """Edge values half of the time, each family a sixth (lone surrogates must be refused);
    `only`: that family (or the edge values) alone."""
    options = {
        EDGE_VALUES: tagged(EDGE_VALUES, edge),
        LONG_LISTS: tagged(LONG_LISTS, long_lists),
        HUGE_GRAMMARS: tagged(HUGE_GRAMMARS, grammars),
        SURROGATES: tagged(SURROGATES, surrogates, refused=True),
    }
    if only is not None:
        return options[only]
    edge_values = options.pop(EDGE_VALUES)
    return weighted(edge_values, edge_values, edge_values, *options.values())


def weighted(*options: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """One of `options`, each as often (`st.one_of` favours the ones whose draws are short)."""
    return st.sampled_from(options).flatmap(lambda option: option)
