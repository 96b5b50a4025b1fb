"""Hypothesis strategies for `ModelInferRequest` messages: the backend's inputs and others,
every KServe datatype and some that are none, shapes past any size, BYTES tensors whose
length prefixes lie, typed contents beside raw ones, and request parameters of every kind
(half of the requests); the families of tests/fuzz/families.py in well-formed requests of
the served model (a sixth each)."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from tests.fuzz.families import (
    FAMILIES,
    HUGE_GRAMMARS,
    LONG_LIST_SAMPLING,
    LONG_LISTS,
    LONG_TEXTS,
    PROMPT_LISTS,
    SURROGATE_SAMPLING,
    SURROGATE_TEXTS,
    SURROGATES,
    VLLM_GRAMMARS,
)
from tests.fuzz.mixing import EDGE_VALUES, weighted
from tests.fuzz.strategies import (
    EDGE_INTEGERS,
    EDGE_TEXT,
    PROMPTS,
    sampling_values,
    structured_outputs,
)

INPUT_NAMES = [
    "text_input", "stream", "sampling_parameters", "exclude_input_in_output",
    "return_finish_reason", "return_cumulative_logprob", "return_logprobs",
    "return_num_input_tokens", "return_num_output_tokens", "image", "unknown_input",
]  # fmt: skip
DATATYPES = st.sampled_from(
    ["BYTES", "BYTES", "BOOL", "INT32", "INT64", "FP32", "UINT8", "STRING", ""]
)
SHAPES = st.one_of(
    st.just([1]), st.lists(st.sampled_from([0, 1, 2, -1, -5, 2**31, 2**62, 2**63 - 1]), max_size=3)
)
PARAMETER_KEYS = st.one_of(
    st.sampled_from(
        ["max_tokens", "temperature", "n", "stop", "seed", "triton_enable_empty_final_response",
         "triton_x", "priority", "timeout", "sequence_id", "lora_name", "structured_outputs",
         "logprobs"]
    ),
    st.text(max_size=8),
)  # fmt: skip


def length_prefixed(texts: list[str]) -> bytes:
    return b"".join(
        struct.pack("<I", len(data)) + data
        for data in (t.encode("utf-8", "surrogatepass") for t in texts)
    )


def lying(texts: list[str], extra: int) -> bytes:
    """A BYTES tensor whose last length prefix claims more bytes than follow (or a torn prefix)."""
    data = length_prefixed(texts)
    return data + struct.pack("<I", (len(data) + extra) % 2**32)[: 1 + extra % 4]


def bytes_contents() -> st.SearchStrategy[tuple[list[str], bytes]]:
    texts = st.lists(st.one_of(EDGE_TEXT, sampling_json()), min_size=0, max_size=3)
    return st.one_of(
        texts.map(lambda t: (t, length_prefixed(t))),
        st.tuples(texts, st.integers(0, 2**32 - 1)).map(lambda p: (p[0], lying(p[0], p[1]))),
        st.binary(max_size=16).map(lambda b: ([], b)),
    )


def sampling_json() -> st.SearchStrategy[str]:
    """A `sampling_parameters` tensor's JSON text (sometimes with a grammar)."""
    with_grammar = st.tuples(sampling_values(), st.one_of(st.none(), structured_outputs()))
    return with_grammar.map(
        lambda p: json.dumps({**p[0], **({"structured_outputs": p[1]} if p[1] else {})})
    )


def tensor() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "name": st.sampled_from(INPUT_NAMES),
            "datatype": DATATYPES,
            "shape": SHAPES,
            "contents": bytes_contents(),
            "typed": st.booleans(),
            "flag": st.booleans(),
        }
    )


def parameter(message: Any, key: str, value: Any) -> None:
    kind, data = value
    setattr(message.parameters[key], kind, data)


PARAMETER_VALUES = st.one_of(
    st.tuples(st.just("bool_param"), st.booleans()),
    st.tuples(st.just("int64_param"), EDGE_INTEGERS.filter(lambda i: -(2**63) <= i < 2**63)),
    st.tuples(st.just("uint64_param"), EDGE_INTEGERS.filter(lambda i: 0 <= i < 2**64)),
    st.tuples(st.just("double_param"), st.floats(allow_nan=True, allow_infinity=True)),
    st.tuples(st.just("string_param"), st.one_of(EDGE_TEXT, sampling_json())),
)


def build(parts: dict[str, Any]) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(
        model_name=parts["model"], model_version=parts["version"], id=parts["id"]
    )
    raw = parts["raw"]
    for spec in parts["tensors"]:
        texts, data = spec["contents"]
        entry = request.inputs.add(
            name=spec["name"], datatype=spec["datatype"], shape=spec["shape"]
        )
        if spec["datatype"] == "BOOL":
            data = bytes([spec["flag"]])
        if raw:
            request.raw_input_contents.append(data)
        elif spec["datatype"] == "BOOL":
            entry.contents.bool_contents.append(spec["flag"])
        else:
            entry.contents.bytes_contents.extend(t.encode("utf-8", "surrogatepass") for t in texts)
    for key, value in parts["parameters"].items():
        parameter(request, key, value)
    for name in parts["outputs"]:
        request.outputs.add(name=name)
    return request


def extra_tensors() -> st.SearchStrategy[list[dict[str, Any]]]:
    """None, a well-formed `sampling_parameters` tensor, or any tensors at all."""
    sampling = sampling_json().map(
        lambda text: {"name": "sampling_parameters", "datatype": "BYTES", "shape": [1],
                      "contents": ([text], length_prefixed([text])), "typed": False, "flag": False}
    )  # fmt: skip
    return st.one_of(st.just([]), sampling.map(lambda t: [t]), st.lists(tensor(), max_size=4))


def edge_requests(model: str) -> st.SearchStrategy[service_pb2.ModelInferRequest]:
    """Mostly the served model with its text input (so that many reach the engine)."""
    text_input = st.builds(
        lambda text: {"name": "text_input", "datatype": "BYTES", "shape": [1],
                      "contents": ([text], length_prefixed([text])), "typed": False, "flag": False},
        EDGE_TEXT,
    )  # fmt: skip
    parts = st.fixed_dictionaries(
        {
            "model": st.sampled_from([model, model, model, "", "other", "a" * 300]),
            "version": st.sampled_from(["", "", "1", "2", "x"]),
            "id": st.text(max_size=8),
            "raw": st.booleans(),
            "tensors": st.tuples(text_input, extra_tensors()).map(lambda p: [p[0], *p[1]]),
            "parameters": st.dictionaries(PARAMETER_KEYS, PARAMETER_VALUES, max_size=4),
            "outputs": st.lists(
                st.sampled_from(["text_output", "finish_reason", "logprobs", "other"]), max_size=2
            ),
        }
    )
    return parts.map(build)


@dataclass(frozen=True)
class Draw:
    """A message, its family, and whether it must be refused (a lone surrogate)."""

    message: service_pb2.ModelInferRequest
    family: str = EDGE_VALUES
    refused: bool = False

    def __repr__(self) -> str:
        shown = str(self.message)
        shown = shown if len(shown) < 600 else f"{shown[:600]}... ({len(shown)} characters)"
        return f"Draw({self.family}, refused={self.refused}, {shown})"


def bytes_tensor(name: str, texts: list[str]) -> dict[str, Any]:
    """A BYTES tensor of `texts` (as UTF-8, lone surrogates as their bytes would be)."""
    return {"name": name, "datatype": "BYTES", "shape": [len(texts)],
            "contents": (texts, length_prefixed(texts)), "typed": False, "flag": False}  # fmt: skip


def family_request(
    model: str,
    texts: list[str],
    sampling: dict[str, Any] | None,
    parameters: dict[str, Any],
    raw: bool,
) -> service_pb2.ModelInferRequest:
    """The served model's request: `texts` as text_input, `sampling` as the
    sampling_parameters tensor's JSON text (ASCII: lone surrogates as escapes), `parameters`
    as string request parameters."""
    tensors = [bytes_tensor("text_input", texts)]
    if sampling is not None:
        tensors.append(bytes_tensor("sampling_parameters", [json.dumps(sampling)]))
    return build(
        {"model": model, "version": "", "id": "family", "raw": raw, "tensors": tensors,
         "parameters": {key: ("string_param", value) for key, value in parameters.items()},
         "outputs": []}
    )  # fmt: skip


def family_draws(model: str) -> tuple[st.SearchStrategy[Draw], ...]:
    """Well-formed requests of the served model for each family."""
    texts = st.one_of(PROMPTS.map(lambda text: [text]), LONG_TEXTS.map(lambda text: [text]),
                      PROMPT_LISTS)  # fmt: skip
    one = PROMPTS.map(lambda text: [text])
    as_text = st.builds(lambda values: {k: json.dumps(v) for k, v in values.items()},
                        VLLM_GRAMMARS)  # fmt: skip
    long_lists = st.builds(
        family_request,
        st.just(model),
        texts,
        st.one_of(st.none(), LONG_LIST_SAMPLING),
        st.just({}),
        st.booleans(),
    )
    grammars = st.one_of(
        st.builds(family_request, st.just(model), one, VLLM_GRAMMARS, st.just({}), st.booleans()),
        st.builds(family_request, st.just(model), one, st.none(), as_text, st.booleans()),
    )
    surrogates = st.one_of(
        st.builds(family_request, st.just(model), SURROGATE_TEXTS.map(lambda text: [text]),
                  st.none(), st.just({}), st.booleans()),
        st.builds(family_request, st.just(model), one, SURROGATE_SAMPLING, st.just({}),
                  st.booleans()),
        st.builds(family_request, st.just(model), one, st.none(),
                  SURROGATE_TEXTS.map(lambda text: {"structured_outputs": json.dumps(
                      {"choice": ["a", text]})}), st.booleans()),
    )  # fmt: skip
    return (
        long_lists.map(lambda message: Draw(message, LONG_LISTS)),
        grammars.map(lambda message: Draw(message, HUGE_GRAMMARS)),
        surrogates.map(lambda message: Draw(message, SURROGATES, refused=True)),
    )


def model_infer_requests(model: str = "fake", only: str | None = None) -> st.SearchStrategy[Draw]:
    """Edge values half of the time, each family a sixth (`only`: that family alone)."""
    edge = edge_requests(model).map(Draw)
    if only is None:
        return weighted(edge, edge, edge, *family_draws(model))
    return dict(zip(FAMILIES, family_draws(model), strict=True))[only]
