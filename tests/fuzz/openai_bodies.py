"""Requests of OpenAI's routes (/v1/completions, /v1/chat/completions): edge values and the
families of tests/fuzz/families.py."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.fuzz.families import (
    LONG_LIST_SAMPLING,
    LONG_TEXTS,
    MESSAGES,
    PROMPT_LISTS,
    SURROGATE_SAMPLING,
    SURROGATE_TEXTS,
    openai_grammars,
)
from tests.fuzz.mixing import (
    CHAT,
    COMPLETIONS,
    Families,
    Fields,
    Request,
    mixed,
    models,
    with_grammar,
)
from tests.fuzz.strategies import EDGE_INTEGERS, EDGE_TEXT, PROMPTS, json_schemas, sampling_values

EDGE_RESPONSE_FORMATS = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "other"])}),
    st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": st.fixed_dictionaries({"name": st.just("x"), "schema": json_schemas()}),
        }
    ),
)
SHORT_MESSAGES = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "system", "assistant", "tool", "x"]),
            "content": st.one_of(PROMPTS, EDGE_TEXT),
        }
    ),
    min_size=1,
    max_size=3,
)


def openai_edge(route: str, model: str) -> st.SearchStrategy[dict[str, Any]]:
    prompt: st.SearchStrategy[Any]
    if route == COMPLETIONS:
        prompt = st.one_of(
            PROMPTS, EDGE_TEXT, st.lists(EDGE_TEXT, max_size=3), st.lists(EDGE_INTEGERS, max_size=4)
        )
    else:
        prompt = SHORT_MESSAGES
    extra: st.SearchStrategy[dict[str, Any]] = st.one_of(
        st.just({}), st.fixed_dictionaries({"response_format": EDGE_RESPONSE_FORMATS})
    )
    body = st.tuples(models(model), prompt, with_grammar(sampling_values()), extra)
    field = "prompt" if route == COMPLETIONS else "messages"
    return body.map(lambda parts: {"model": parts[0], field: parts[1], **parts[2], **parts[3]})


def openai_families(route: str, model: str) -> Families:
    """Body fields of OpenAI's routes for each family (long lists, grammars, lone
    surrogates), for the served model (lone surrogates in its name too)."""
    chat = route == CHAT
    field = "messages" if chat else "prompt"
    short = (
        st.builds(lambda text: [{"role": "user", "content": text}], PROMPTS) if chat else PROMPTS
    )
    long_prompts = (
        st.one_of(MESSAGES, short) if chat else st.one_of(PROMPTS, LONG_TEXTS, PROMPT_LISTS)
    )
    surrogate_prompts = (
        st.builds(lambda text: [{"role": "user", "content": text}], SURROGATE_TEXTS)
        if chat
        else st.one_of(SURROGATE_TEXTS, SURROGATE_TEXTS.map(lambda text: ["Hi", text]))
    )

    def body(prompt: Any, fields: dict[str, Any], name: str = model) -> dict[str, Any]:
        # one new token: /v1/completions asks 16 by default, past the real engine's limit
        return {"model": name, field: prompt, "max_tokens": 1, **fields}

    sampling: st.SearchStrategy[dict[str, Any]] = st.one_of(
        st.just({}), LONG_LIST_SAMPLING, LONG_LIST_SAMPLING
    )
    surrogates = st.one_of(
        st.builds(body, surrogate_prompts, st.just({})),
        st.builds(body, short, SURROGATE_SAMPLING),
        st.builds(body, short, st.just({}), SURROGATE_TEXTS),
        st.builds(
            lambda prompt, name: body(prompt, {"response_format": {"type": "json_schema",
                                      "json_schema": {"name": name, "schema": {}}}}),
            short, SURROGATE_TEXTS,
        ),
    )  # fmt: skip
    return (
        st.builds(body, long_prompts, sampling),
        st.builds(body, short, openai_grammars(chat)),
        surrogates,
    )


def openai(route: str, model: str, only: str | None) -> st.SearchStrategy[Request]:
    path = "/v1/" + ("completions" if route == COMPLETIONS else "chat/completions")

    def build(drawn: tuple[Fields, bool]) -> Request:
        (family, fields, refused), stream = drawn
        body = {**fields, "stream": stream}
        return Request(route, "POST", path, body, family=family, refused=refused)

    fields = mixed(openai_edge(route, model), *openai_families(route, model), only=only)
    return st.tuples(fields, st.booleans()).map(build)
