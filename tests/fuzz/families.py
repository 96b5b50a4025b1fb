"""The request families that once stalled or killed the server, as strategies of field values
each inference route puts where its body takes them (tests/fuzz/bodies.py and
grpc_requests.py): long strings inside lists (stop words, bad words, prompts, messages) and
token ids past the vocabulary; huge grammars (choice lists, JSON schemas, regexes, EBNF with
counted repetition), at and past the grammar limit; lone surrogates in any string field.
Sizes are picked from a few values around each limit, so a draw costs microseconds whatever
its size."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from hypothesis import strategies as st

from app.core.limits import RequestLimits, json_size

LONG_LISTS = "long strings in lists"
HUGE_GRAMMARS = "huge grammars"
SURROGATES = "lone surrogates"
FAMILIES = (LONG_LISTS, HUGE_GRAMMARS, SURROGATES)
LIMITS = RequestLimits()
MAX_STOP_BYTES = LIMITS.max_stop_bytes or 16384
MAX_GRAMMAR_BYTES = LIMITS.max_grammar_bytes or 65536
MAX_STOP = LIMITS.max_stop or 64
MAX_TOKEN_IDS = LIMITS.max_token_ids or 4096
VOCABULARY = 49152
"""The default model's vocabulary (SmolLM2): ids from here on are out of it."""
TEXT_BYTES = st.sampled_from([3, 200, 4096, MAX_STOP_BYTES + 1, 70_000, 1 << 20, 3 << 20])
"""UTF-8 bytes of one long string: a few bytes to megabytes (over the body limits)."""
PIECES = st.sampled_from(["ab ", "é", "🙂", "Hi! "])


@cache
def text_of(size: int, piece: str) -> str:
    """About `size` UTF-8 bytes of `piece` repeated."""
    return piece * max(1, size // len(piece.encode()))


LONG_TEXTS = st.builds(text_of, TEXT_BYTES, PIECES)


def size_of(value: Any) -> int:
    """Bytes of `value` as JSON text, as the server counts them (app/core/limits.py)."""
    return json_size(value, 10**12)


def fitted(make: Callable[[str], Any], target: int, measure: Callable[[Any], int] = size_of) -> Any:
    """`make(pad)` with `pad` the ASCII text that makes it `target` bytes by `measure` (or
    `make("")` where that is more)."""
    size = measure(make(""))
    value = make("x" * max(0, target - size))
    assert measure(value) == max(size, target)
    return value


@cache
def stop_words(total: int, entries: int, split: bool) -> dict[str, list[str]]:
    """`entries` stop strings (half of them bad words when `split`) of `total` bytes in all."""
    words = [f"w{index:04d}" for index in range(entries)]
    half = entries // 2 if split else entries

    def make(pad: str) -> dict[str, list[str]]:
        grouped = {"stop": words[:half], "bad_words": words[half:]}
        last = "bad_words" if grouped["bad_words"] else "stop"
        grouped[last] = [*grouped[last][:-1], grouped[last][-1] + pad]
        return {name: group for name, group in grouped.items() if group}

    words_at_size: dict[str, list[str]] = fitted(
        make, total, lambda fields: sum(map(size_of, fields.values()))
    )
    return words_at_size


STOP_WORDS = st.builds(
    stop_words,
    st.sampled_from([64, MAX_STOP_BYTES, MAX_STOP_BYTES + 1]),
    st.sampled_from([1, 8, MAX_STOP, MAX_STOP + 1]),
    st.booleans(),
)
"""Stop strings and bad words just under and just over MAX_STOP_BYTES (and MAX_STOP)."""
HUGE_STOP = st.builds(
    lambda name, text, entries: {name: [text] * entries},
    st.sampled_from(["stop", "bad_words"]),
    LONG_TEXTS,
    st.sampled_from([1, 3]),
)


@cache
def token_ids(kind: str, count: int) -> list[int]:
    """`count` ids: the same one (`kind` "same": that id), or 0, 1, 2..."""
    return list(range(count)) if kind == "range" else [int(kind)] * count


TOKEN_IDS = st.one_of(
    st.builds(token_ids, st.sampled_from([str(VOCABULARY), str(VOCABULARY - 1), str(2**31),
                                          str(2**63), str(10**30), "-1"]), st.just(1)),
    st.builds(token_ids, st.just("0"), st.just(MAX_TOKEN_IDS)),
    st.builds(token_ids, st.just("range"), st.sampled_from([MAX_TOKEN_IDS, MAX_TOKEN_IDS + 1,
                                                            VOCABULARY])),
)  # fmt: skip
"""Token ids past the vocabulary or any integer type, and lists at and past MAX_TOKEN_IDS
(built when drawn: a strategy's repr must stay short)."""
BIAS_KEYS = st.one_of(
    st.sampled_from([str(VOCABULARY), "99999999999999999999", "-1", "1e3", "x"]).map(
        lambda key: [key]
    ),
    st.sampled_from([MAX_TOKEN_IDS, MAX_TOKEN_IDS + 1]).map(lambda n: [str(i) for i in range(n)]),
)
TOKEN_ID_FIELDS = st.one_of(
    st.builds(lambda ids: {"allowed_token_ids": ids}, TOKEN_IDS),
    st.builds(lambda ids: {"stop_token_ids": ids}, TOKEN_IDS),
    st.builds(
        lambda keys, bias: {"logit_bias": dict.fromkeys(keys, bias)},
        BIAS_KEYS,
        st.sampled_from([1.0, -100.0, 1e308]),
    ),
)
LONG_LIST_SAMPLING = st.one_of(
    STOP_WORDS, STOP_WORDS, HUGE_STOP, TOKEN_ID_FIELDS, st.tuples(STOP_WORDS, TOKEN_ID_FIELDS).map(
        lambda pair: {**pair[0], **pair[1]}
    )
)  # fmt: skip
"""Sampling fields of the long-lists family."""
PROMPT_LISTS = st.one_of(
    st.builds(lambda text: [text], LONG_TEXTS),
    st.builds(lambda n, size: [text_of(size, "ab ")] * n, st.sampled_from([8, 64, 65]),
              st.sampled_from([16, 256])),
    st.builds(lambda text: ["Hi", text, "Hi"], LONG_TEXTS),
)  # fmt: skip
"""Prompt lists (OpenAI completions, gRPC text_input entries): one huge entry, many medium."""
MESSAGES = st.one_of(
    st.builds(lambda text: [{"role": "user", "content": text}], LONG_TEXTS),
    st.builds(
        lambda n, size: [{"role": "user", "content": text_of(size, "ab ")}] * n,
        st.sampled_from([8, 100]),
        st.sampled_from([16, 256]),
    ),
)
"""Chat messages with long contents: one huge message, many medium ones."""


def words(count: int) -> list[str]:
    return [f"w{index:06d}" for index in range(count)]


def choice_list(count: int, pad: str) -> dict[str, Any]:
    return {"choice": [*words(count), "w" + pad]}


def enum_schema(count: int, pad: str) -> dict[str, Any]:
    return {"json": {"enum": [*words(count), "w" + pad]}}


def object_schema(count: int, pad: str) -> dict[str, Any]:
    names = words(count)
    properties: dict[str, Any] = {name: {"type": "integer"} for name in names}
    properties["p" + pad] = {"type": "string"}
    return {"json": {"type": "object", "properties": properties, "required": names}}


def nested_schema(depth: int, pad: str) -> dict[str, Any]:
    """Objects and arrays nested `depth` deep (its size is mostly the padded description)."""
    schema: dict[str, Any] = {"type": "string", "description": pad}
    for level in range(depth):
        if level % 2:
            schema = {"type": "array", "items": schema, "minItems": 1}
        else:
            schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return {"json": schema}


def alternation_regex(count: int, pad: str) -> dict[str, Any]:
    return {"regex": "(" + "|".join(words(count)) + ")" + pad}


def ebnf_rules(count: int, pad: str) -> dict[str, Any]:
    names = [f"r{index}" for index in range(count)]
    rules = [f'{name} ::= "{word}"' for name, word in zip(names, words(count), strict=True)]
    root = "root ::= " + " | ".join([*names, "last"])
    return {"grammar": "\n".join([root, *rules, f'last ::= "x{pad}"'])}


SHAPES: dict[str, Callable[[int, str], dict[str, Any]]] = {
    "choice": choice_list,
    "enum": enum_schema,
    "properties": object_schema,
    "nesting": nested_schema,
    "regex": alternation_regex,
    "ebnf": ebnf_rules,
}
SIZES = {"small": 1000, "huge": 100_000, "under": MAX_GRAMMAR_BYTES, "over": MAX_GRAMMAR_BYTES + 1}
"""Entries of a grammar (`small`, `huge`: 10^3 and 10^5; nesting 8 and 400 deep), or its
bytes as the server counts them (`under`: just at MAX_GRAMMAR_BYTES; `over`: one byte more)."""
DEPTHS = {"small": 8, "huge": 400, "under": 64, "over": 200}
COUNTED_REPETITIONS: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [{"grammar": "root ::= [a-z]{1,100000}"}, {"grammar": "root ::= ([a-z]{1,1000}){1,1000}"},
     {"grammar": 'root ::= "a"{100000}'}, {"grammar": 'root ::= ("ab" | [0-9]{1,50000}){1,50000}'},
     {"grammar": "start: /[a-z]{1,100000}/"}, {"regex": "[a-z]{1,100000}"},
     {"regex": "(a{1,1000}){1,1000}"}, {"regex": "[a-z]{100000}"},
     {"json": {"type": "string", "minLength": 100000}},
     {"json": {"type": "string", "pattern": "[a-z]{1,100000}"}},
     {"json": {"type": "array", "items": {"type": "string", "maxLength": 100000},
               "minItems": 1000, "maxItems": 100000}}]
)  # fmt: skip
"""Grammars small in bytes whose compile may be slow (GRAMMAR_COMPILE_TIMEOUT_SECONDS bounds
it: a compile past it is a 400; this vLLM build compiles each of these in 0.1-2.5 s)."""


def sized(shape: str, size: str, place: Callable[[dict[str, Any]], Any]) -> Any:
    """The field value `place(constraint)` of a `shape` grammar at `size`."""
    make = SHAPES[shape]
    if shape == "nesting":
        depth = DEPTHS[size]
        return place(make(depth, "")) if size in ("small", "huge") else fitted(
            lambda pad: place(make(depth, pad)), SIZES[size]
        )  # fmt: skip
    if size in ("small", "huge"):
        return place(make(SIZES[size], ""))
    target = SIZES[size]
    per_entry = size_of(place(make(1000, ""))) / 1000
    count = int(target / per_entry)
    while size_of(place(make(count, ""))) >= target:
        count = count * 19 // 20
    return fitted(lambda pad: place(make(count, pad)), target)


def placed(field: str, constraint: dict[str, Any]) -> tuple[str, Any]:
    """The field and value a constraint is sent as: vLLM's `structured_outputs` or
    `guided_decoding` as it is, or vLLM's old top-level names (`guided`: `guided_choice`,
    `guided_json`...) with its value alone; for a JSON schema, OpenAI's `response_format`
    (json_schema) or forced `tools` (a function whose parameters are the schema), and the
    Responses API's `text` (its format a json_schema) or `function_tools` (its flat tools)."""
    kind, value = next(iter(constraint.items()))
    if field == "guided":
        return f"guided_{kind}", value
    if field == "response_format":
        return field, {"type": "json_schema", "json_schema": {"name": "x", "schema": value}}
    if field == "tools":
        return field, [{"type": "function", "function": {"name": "f", "parameters": value}}]
    if field == "text":
        return field, {"format": {"type": "json_schema", "name": "x", "schema": value}}
    if field == "function_tools":
        return "tools", [{"type": "function", "name": "f", "parameters": value}]
    return field, constraint


@cache
def grammar(shape: str, size: str, field: str) -> dict[str, Any]:
    """A `shape` grammar at `size` as `field` (see `placed`); built once (never changed)."""
    name = placed(field, SHAPES[shape](1, ""))[0]
    return {name: sized(shape, size, lambda constraint: placed(field, constraint)[1])}


def grammars_in(fields: list[str], shapes: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """One grammar of `shapes` at any size in any of `fields`."""
    return st.builds(
        grammar, st.sampled_from(shapes), st.sampled_from(sorted(SIZES)), st.sampled_from(fields)
    )


VLLM_FIELDS = ["structured_outputs", "guided_decoding", "guided"]
VLLM_GRAMMARS = st.one_of(
    grammars_in(VLLM_FIELDS, sorted(SHAPES)),
    grammars_in(VLLM_FIELDS, sorted(SHAPES)),
    st.builds(lambda constraint, field: dict([placed(field, constraint)]), COUNTED_REPETITIONS,
              st.sampled_from(VLLM_FIELDS)),
)  # fmt: skip
"""Sampling fields of the huge-grammars family, as vLLM names them."""
JSON_SHAPES = ["enum", "nesting", "properties"]
TOOL_CHOICES = st.sampled_from(["required", {"type": "function", "function": {"name": "f"}}])
RESPONSE_FORMATS = grammars_in(["response_format"], JSON_SHAPES)
FORCED_TOOLS = st.builds(
    lambda tools, choice: {**tools, "tool_choice": choice},
    grammars_in(["tools"], JSON_SHAPES),
    TOOL_CHOICES,
)


@cache
def many_tools(count: int) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": f"f{i}", "parameters": {"type": "object"}}}
        for i in range(count)
    ]


MANY_TOOLS = st.builds(
    lambda count: {"tools": many_tools(count), "tool_choice": "required"},
    st.sampled_from([1000, 10_000]),
)


def openai_grammars(chat: bool) -> st.SearchStrategy[dict[str, Any]]:
    """The family on OpenAI's routes: vLLM's fields, response_format's json_schema, and on
    chat, forced tool calls (tool_choice "required" or naming the function)."""
    options = [VLLM_GRAMMARS, RESPONSE_FORMATS]
    if chat:
        options += [FORCED_TOOLS, MANY_TOOLS]
    return st.one_of(options)


SURROGATE_TEXTS = st.sampled_from(
    ["\ud800", "\udfff", "a\ud800b", "\udbff\udbff", "🙂\udc00", "\udfff" * 1000]
)
"""Strings no UTF-8 can carry (sent as JSON escapes: `json.dumps` with ensure_ascii)."""
SURROGATE_SAMPLING = st.one_of(
    st.builds(lambda text: {"stop": [text]}, SURROGATE_TEXTS),
    st.builds(lambda text: {"stop": text}, SURROGATE_TEXTS),
    st.builds(lambda text: {"bad_words": ["ok", text]}, SURROGATE_TEXTS),
    st.builds(lambda text: {"logit_bias": {text: 1.0}}, SURROGATE_TEXTS),
    st.builds(lambda text: {"structured_outputs": {"choice": ["a", text]}}, SURROGATE_TEXTS),
    st.builds(lambda text: {"structured_outputs": {"regex": text}}, SURROGATE_TEXTS),
    st.builds(lambda text: {"structured_outputs": {"json": {"enum": [text]}}}, SURROGATE_TEXTS),
)
"""Sampling fields with a lone surrogate (each a 400: no field may carry one)."""
