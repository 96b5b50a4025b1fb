"""Hypothesis strategies for inputs that are well typed but sit at the edges: sampling values
at and past every bound a number type has, and structured-output grammars (JSON schemas,
regexes, choices, EBNF) including ones no compiler can use. They cost microseconds to draw,
so each route gets many of them beside schemathesis's schema-driven cases (whose negative
cases fall back to fitting ones where schemathesis cannot negate a schema:
`misfit_or_fitting`)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from schemathesis.core.errors import UnsupportedSchema

EDGE_INTEGERS = st.sampled_from(
    [
        0,
        1,
        -1,
        2,
        7,
        16,
        17,
        64,
        2**31 - 1,
        2**31,
        -(2**31),
        2**53,
        2**63 - 1,
        2**63,
        2**64,
        -(2**63) - 1,
        10**30,
    ]
)
EDGE_FLOATS = st.sampled_from([0.0, -0.0, 1e-320, 0.5, 1.0, 1.5, 2.0, -2.0, 100.0, 1e308, -1e308])
PROMPTS = st.one_of(
    st.sampled_from(["Hi", "The capital of France is", "1, 2, 3,"]), st.text(max_size=20)
)
"""Prompts the model takes as they are (edge values beside them in EDGE_TEXT)."""
EDGE_TEXT = st.one_of(
    st.sampled_from(
        ["", " ", "\x00", "\n", "\ud7ff", "🙂", "<|endoftext|>", "a " * 3000, "{{ x }}", "%s"]
    ),
    st.text(max_size=20),
)
SCALARS = st.one_of(st.none(), st.booleans(), EDGE_INTEGERS, EDGE_FLOATS, EDGE_TEXT)
VALUES = st.one_of(
    SCALARS,
    st.lists(st.one_of(EDGE_INTEGERS, EDGE_TEXT), max_size=6),
    st.dictionaries(st.one_of(EDGE_TEXT, EDGE_INTEGERS.map(str)), EDGE_FLOATS, max_size=4),
)
SAMPLING_FIELDS = [
    "max_tokens", "min_tokens", "n", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
    "stop_token_ids", "bad_words", "allowed_token_ids", "logit_bias", "logprobs", "ignore_eos",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "skip_special_tokens",
    "include_stop_str_in_output", "spaces_between_special_tokens", "logprob_token_ids",
    "truncate_prompt_tokens", "thinking_token_budget", "prompt_logprobs", "top_logprobs",
    "max_completion_tokens", "echo", "stream_options", "response_format", "lora_name",
    "apply_chat_template", "guided_decoding", "output_kind", "detokenize", "unknown_field",
]  # fmt: skip


def sampling_values(max_size: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    """A few sampling fields, each with a well-typed edge value (or a value of another type)."""
    return st.dictionaries(st.sampled_from(SAMPLING_FIELDS), VALUES, max_size=max_size)


NAMES = st.sampled_from(["a", "b", "city", "x-y", "", "\x00", "🙂"])
PATTERNS = st.sampled_from(
    ["[a-z]+", "(", "a{3,2}", "\\p{Greek}+", "^$", ".*", "[", "a**", "\\", "(?<x>a)"]
)


def json_schemas(max_leaves: int = 8) -> st.SearchStrategy[dict[str, Any]]:
    """JSON schemas that vLLM's grammar compilers may or may not take: bounds past any output
    (minItems 100000), self references, contradictions, broken patterns."""
    leaves = st.one_of(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])}
        ),
        st.fixed_dictionaries({"type": st.just("string"), "pattern": PATTERNS}),
        st.fixed_dictionaries({"type": st.just("string"), "maxLength": EDGE_INTEGERS}),
        st.fixed_dictionaries({"enum": st.lists(SCALARS, max_size=3)}),
        st.fixed_dictionaries({"const": SCALARS}),
        st.just({"$ref": "#"}),
        st.just({"$ref": "#/definitions/missing"}),
        st.just({}),
        st.just({"not": {}}),
    )

    def containers(
        children: st.SearchStrategy[dict[str, Any]],
    ) -> st.SearchStrategy[dict[str, Any]]:
        return st.one_of(
            st.fixed_dictionaries(
                {"type": st.just("array"), "items": children},
                optional={
                    "minItems": EDGE_INTEGERS,
                    "maxItems": EDGE_INTEGERS,
                    "uniqueItems": st.booleans(),
                },
            ),
            st.fixed_dictionaries(
                {
                    "type": st.just("object"),
                    "properties": st.dictionaries(NAMES, children, max_size=3),
                },
                optional={
                    "required": st.lists(NAMES, max_size=3),
                    "minProperties": EDGE_INTEGERS,
                    "additionalProperties": st.one_of(st.booleans(), children),
                    "patternProperties": st.dictionaries(PATTERNS, children, max_size=2),
                },
            ),
            st.fixed_dictionaries({"anyOf": st.lists(children, min_size=1, max_size=3)}),
            st.fixed_dictionaries({"allOf": st.lists(children, min_size=1, max_size=3)}),
        )

    return st.recursive(leaves, containers, max_leaves=max_leaves)


GRAMMARS = st.sampled_from(
    [
        'root ::= "a" | "b"',
        "root ::= root",
        "root ::= ",
        'root ::= "a"*',
        "x ::= y",
        "root ::= [",
        "start: /a+/",
    ]
)


def structured_outputs() -> st.SearchStrategy[dict[str, Any]]:
    """vLLM's `structured_outputs` objects: one constraint each (sometimes two, which vLLM
    refuses), any of them possibly unusable."""
    one = st.one_of(
        st.fixed_dictionaries({"json": json_schemas()}),
        st.fixed_dictionaries({"regex": st.one_of(PATTERNS, st.text(max_size=10))}),
        st.fixed_dictionaries({"choice": st.lists(EDGE_TEXT, max_size=4)}),
        st.fixed_dictionaries({"grammar": st.one_of(GRAMMARS, st.text(max_size=20))}),
        st.fixed_dictionaries({"json_object": st.booleans()}),
    )
    return st.one_of(one, st.tuples(one, one).map(lambda pair: {**pair[0], **pair[1]}))


@st.composite
def misfit_or_fitting(draw: st.DrawFn, misfit: Any, fitting: Any) -> Any:
    """A case that does not fit the schema, or one that does where schemathesis cannot negate
    the part of the schema it drew (vLLM's `ResponsesRequest` has one, reached past a thousand
    inputs): the harness's limit, not the server's."""
    try:
        return draw(misfit)
    except UnsupportedSchema:
        return draw(fitting)
