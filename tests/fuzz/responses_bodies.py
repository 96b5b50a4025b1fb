"""Requests of OpenAI's Responses API (`POST /v1/responses`): edge values (`input` as a
string, messages or input items, `instructions`, `max_output_tokens`, `text.format`,
`include` with `top_logprobs`, tools, `store` / `background` / `previous_response_id`), the
families of tests/fuzz/families.py, and bodies over MAX_TOKENS_LIMIT, each refused naming
`max_output_tokens`. Also the routes of stored responses (GET, cancel), always a 404."""

from __future__ import annotations

from functools import cache
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from tests.fuzz.families import (
    COUNTED_REPETITIONS,
    JSON_SHAPES,
    LONG_LIST_SAMPLING,
    LONG_TEXTS,
    MESSAGES,
    SHAPES,
    SURROGATE_SAMPLING,
    SURROGATE_TEXTS,
    grammars_in,
    placed,
    text_of,
)
from tests.fuzz.mixing import (
    RESPONSES,
    Families,
    Fields,
    Request,
    mixed,
    models,
    tagged,
    weighted,
    with_grammar,
)
from tests.fuzz.strategies import (
    EDGE_FLOATS,
    EDGE_INTEGERS,
    EDGE_TEXT,
    NAMES,
    PROMPTS,
    json_schemas,
    sampling_values,
)

PATH = "/v1/responses"
MAX_OUTPUT_TOKENS = "max_output_tokens"
OVER_LIMIT = "max_output_tokens over the limit"
"""Bodies otherwise fine whose max_output_tokens is over MAX_TOKENS_LIMIT (4 on the double's
server, 2 on the real engine's): each a 400 naming it."""
STORED = ("GET /v1/responses/{response_id}", "POST /v1/responses/{response_id}/cancel")
"""The routes of a stored response: none is, so each is a 404 naming `response_id`."""
INCLUDES = ["message.output_text.logprobs", "reasoning.encrypted_content", "x"]
IMAGE_URLS = st.sampled_from(
    ["data:image/png;base64,iVBORw0KGgo=", "data:image/png;base64,!!", "file:///etc/passwd",
     "http://127.0.0.1:1/a.png", "", "not a url"]
)  # fmt: skip


def input_text(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text}


def user_parts(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    """`input` as one user message of content parts."""
    return [{"role": "user", "content": list(parts)}]


CONTENT_PARTS = st.one_of(
    st.builds(input_text, st.one_of(PROMPTS, EDGE_TEXT)),
    st.builds(lambda url: {"type": "input_image", "image_url": url}, IMAGE_URLS),
    st.just({"type": "input_file", "file_data": "eA=="}),
    st.just({"type": "x"}),
)
OUTPUT_PARTS = [
    {"type": "output_text", "text": "Paris.", "annotations": []},
    {"type": "refusal", "refusal": "I cannot help with that."},
]
ITEMS = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "system", "developer", "assistant", "tool", "x"]),
            "content": st.one_of(PROMPTS, EDGE_TEXT, st.lists(CONTENT_PARTS, max_size=3)),
        }
    ),
    st.builds(
        lambda text: {"type": "function_call_output", "call_id": "c", "output": text}, PROMPTS
    ),
    st.just({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}),
    st.builds(
        lambda parts: {
            "type": "message",
            "role": "assistant",
            "id": "m",
            "status": "completed",
            "content": parts,
        },
        st.lists(st.sampled_from(OUTPUT_PARTS), max_size=2),
    ),
)
"""Input items: messages (text or content parts), tool calls and their outputs, earlier
answers (an assistant's output message, whose parts may be a refusal or none)."""
EDGE_FORMATS = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "other"])}),
    st.fixed_dictionaries(
        {"type": st.just("json_schema"), "name": NAMES, "schema": json_schemas()},
        optional={"strict": st.booleans()},
    ),
)
EDGE_TOOLS = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["function", "web_search", "x"]),
            "name": st.sampled_from(["f", "g", ""]),
            "parameters": json_schemas(4),
        }
    ),
    max_size=2,
)
TOOL_CHOICES = st.sampled_from(
    ["auto", "none", "required", "x", {"type": "function", "name": "f"},
     {"type": "function", "name": "missing"}]
)  # fmt: skip
RESPONSES_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "instructions": st.one_of(st.none(), PROMPTS, EDGE_TEXT),
        MAX_OUTPUT_TOKENS: st.one_of(st.none(), EDGE_INTEGERS),
        "text": st.fixed_dictionaries({"format": EDGE_FORMATS}),
        "include": st.lists(st.sampled_from(INCLUDES), max_size=2),
        "top_logprobs": EDGE_INTEGERS,
        "tools": EDGE_TOOLS,
        "tool_choice": TOOL_CHOICES,
        "store": st.booleans(),
        "background": st.booleans(),
        "previous_response_id": st.sampled_from(["resp_x", ""]),
        "truncation": st.sampled_from(["auto", "disabled", "x"]),
        "temperature": EDGE_FLOATS,
    },
)
"""The Responses API's own fields at their edges."""


def responses_edge(model: str) -> st.SearchStrategy[dict[str, Any]]:
    inputs = st.one_of(PROMPTS, EDGE_TEXT, st.lists(ITEMS, max_size=3))
    body = st.tuples(models(model), inputs, with_grammar(sampling_values()), RESPONSES_FIELDS)
    return body.map(lambda parts: {"model": parts[0], "input": parts[1], **parts[2], **parts[3]})


def over_limit(model: str) -> st.SearchStrategy[dict[str, Any]]:
    """Bodies fine but for max_output_tokens, over the limit of either server (an `input`
    the engine double reads too)."""
    inputs = st.sampled_from(["Hi", [{"role": "user", "content": "Hi"}]])
    tokens = st.sampled_from([5, 64, 2**31, 2**63, 10**30])
    return st.builds(
        lambda given, count: {"model": model, "input": given, MAX_OUTPUT_TOKENS: count},
        inputs,
        tokens,
    )


@cache
def many_functions(count: int) -> list[dict[str, Any]]:
    return [
        {"type": "function", "name": f"f{i}", "parameters": {"type": "object"}}
        for i in range(count)
    ]


RESPONSES_GRAMMARS = st.one_of(
    grammars_in(["structured_outputs"], sorted(SHAPES)),
    grammars_in(["text"], JSON_SHAPES),
    st.builds(
        lambda tools, choice: {**tools, "tool_choice": choice},
        grammars_in(["function_tools"], JSON_SHAPES),
        st.sampled_from(["required", {"type": "function", "name": "f"}]),
    ),
    st.builds(
        lambda count: {"tools": many_functions(count), "tool_choice": "required"},
        st.sampled_from([1000, 10_000]),
    ),
    COUNTED_REPETITIONS.map(
        lambda constraint: dict(
            [placed("text" if "json" in constraint else "structured_outputs", constraint)]
        )
    ),
)
"""The huge-grammars family as the Responses API takes grammars: vLLM's
`structured_outputs`, `text.format` (json_schema) and forced tools (`tool_choice` "required"
or naming the function)."""
LONG_INPUTS = st.one_of(
    LONG_TEXTS,
    MESSAGES,
    st.builds(lambda text: user_parts(input_text(text)), LONG_TEXTS),
    st.builds(
        lambda n, size: user_parts(*[input_text(text_of(size, "ab "))] * n),
        st.sampled_from([8, 100]),
        st.sampled_from([16, 256]),
    ),
)
"""`input` as one huge string, message or input text, or many medium input texts."""
LONG_FIELDS = st.one_of(
    st.just({}),
    LONG_LIST_SAMPLING,
    LONG_LIST_SAMPLING,
    st.builds(lambda text: {"instructions": text}, LONG_TEXTS),
    st.builds(
        lambda n: {"include": ["message.output_text.logprobs"] * n, "top_logprobs": 1},
        st.sampled_from([100, 10_000]),
    ),
)


def surrogate_fields(text: str) -> st.SearchStrategy[dict[str, Any]]:
    """The Responses API's own fields carrying `text`."""
    schema = {"type": "json_schema", "name": text, "schema": {}}
    tool = {"type": "function", "name": text, "parameters": {"type": "object"}}
    return st.sampled_from(
        [{"instructions": text}, {"text": {"format": schema}}, {"previous_response_id": text},
         {"tools": [tool], "tool_choice": "required"}, {"include": [text]}]
    )  # fmt: skip


def responses_families(model: str) -> Families:
    """Body fields of /v1/responses for each family (long lists, grammars, lone surrogates),
    one new token each (the real engine's server takes two at most)."""

    def body(given: Any, fields: dict[str, Any], name: str = model) -> dict[str, Any]:
        return {"model": name, "input": given, MAX_OUTPUT_TOKENS: 1, **fields}

    surrogate_inputs = st.one_of(
        SURROGATE_TEXTS,
        SURROGATE_TEXTS.map(lambda text: [{"role": "user", "content": text}]),
        SURROGATE_TEXTS.map(lambda text: user_parts(input_text("Hi"), input_text(text))),
    )
    surrogates = st.one_of(
        st.builds(body, surrogate_inputs, st.just({})),
        st.builds(body, PROMPTS, SURROGATE_TEXTS.flatmap(surrogate_fields)),
        st.builds(body, PROMPTS, SURROGATE_SAMPLING),
        st.builds(body, PROMPTS, st.just({}), SURROGATE_TEXTS),
    )
    return (
        st.builds(body, st.one_of(LONG_INPUTS, PROMPTS), LONG_FIELDS),
        st.builds(body, PROMPTS, RESPONSES_GRAMMARS),
        surrogates,
    )


def responses(model: str, only: str | None) -> st.SearchStrategy[Request]:
    """The route's requests (`only`: of that family): a tenth of them over the limit."""

    def build(drawn: tuple[Fields, bool]) -> Request:
        (family, fields, refused), stream = drawn
        names = MAX_OUTPUT_TOKENS if family == OVER_LIMIT else None
        body = {**fields, "stream": stream}
        return Request(RESPONSES, "POST", PATH, body, family=family, refused=refused, names=names)

    over = tagged(OVER_LIMIT, over_limit(model), refused=True)
    if only == OVER_LIMIT:
        fields = over
    else:
        fields = mixed(responses_edge(model), *responses_families(model), only=only)
        fields = fields if only is not None else weighted(*[fields] * 9, over)
    return st.tuples(fields, st.booleans()).map(build)


RESPONSE_IDS = st.one_of(
    st.sampled_from(
        ["resp_x", "resp_" + "0" * 32, "a" * 4000, "\ud800", "🙂", " ", "\x00", "%2F", "cancel"]
    ),
    st.text(st.characters(exclude_characters="/"), min_size=1, max_size=40).filter(
        lambda text: text not in (".", "..")
    ),
)
"""Ids of a response (a slash would be another path; dots alone, the parent's)."""


def stored_responses() -> st.SearchStrategy[Request]:
    """GET and cancel of a stored response: a 404 naming `response_id` (none is stored)."""

    def build(route: str, response_id: str) -> Request:
        method, path = route.split(" ", 1)
        path = path.format(response_id=quote(response_id, safe="", errors="surrogatepass"))
        return Request(route, method, path, names="response_id")

    return st.builds(build, st.sampled_from(STORED), RESPONSE_IDS)
