"""Request translation: parameters to `SamplingParams`, flags, LoRA, images, chat template."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from vllm.sampling_params import RequestOutputKind, SamplingParams

from app.core.limits import RequestLimits
from app.core.service import GenerationService
from app.engine.sampling import to_sampling_params
from app.errors import InvalidRequestError
from app.repository.layout import ModelSpec
from app.repository.served_model import ModelState, ServedModel
from app.schemas.generate import ENGINE_MAX_TOKENS, GenerateRequest
from app.triton.inputs import body_inputs
from app.triton.request import StreamPolicy, triton_request
from tests.doubles import FakeEngine, ReceivedRequest


def served(
    loras: dict[str, Path] | None = None, images: bool = False, chat: bool = False
) -> ServedModel:
    parameters = {"APPLY_CHAT_TEMPLATE": "true"} if chat else {}
    spec = ModelSpec(
        name="m",
        version="1",
        version_path=Path("."),
        engine_args={},
        loras=loras,
        parameters=parameters,
    )
    return ServedModel(spec=spec, engine=FakeEngine(supports_images=images), state=ModelState.READY)


@dataclass
class Plan:
    engine_request: ReceivedRequest
    stream: bool
    prepend_input: bool
    logprobs_requested: bool


def plan(body: dict[str, Any], stream: bool = False, model: ServedModel | None = None) -> Plan:
    """Read `body` as the backend does, run it through the core to the engine double, and
    show what the engine received."""
    model = model or served()
    triton = triton_request(
        body_inputs(GenerateRequest.model_validate(body)), model, StreamPolicy(default=stream)
    )

    async def start() -> None:
        outputs = GenerationService().stream(model, triton.request)
        try:
            await anext(outputs)
        finally:
            await outputs.aclose()

    asyncio.run(start())
    engine = model.engine
    assert isinstance(engine, FakeEngine)
    engine_request = engine.requests[-1]
    return Plan(
        engine_request, triton.request.stream, triton.prepend_input, triton.logprobs_requested
    )


def test_parameters_become_sampling_params() -> None:
    sampling = plan(
        {
            "text_input": "x",
            "parameters": {
                "temperature": 0.7,
                "top_p": 0.9,
                "top_k": 5,
                "max_tokens": 7,
                "min_tokens": 2,
                "stop": ["a", "b"],
                "seed": 3,
                "ignore_eos": True,
                "repetition_penalty": 1.1,
                "presence_penalty": 0.5,
                "frequency_penalty": 0.25,
            },
        }
    ).engine_request.sampling_params
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.7, 0.9, 5)
    assert (sampling.max_tokens, sampling.min_tokens, sampling.seed) == (7, 2, 3)
    assert sampling.stop == ["a", "b"] and sampling.ignore_eos
    assert (sampling.repetition_penalty, sampling.presence_penalty, sampling.frequency_penalty) == (
        1.1,
        0.5,
        0.25,
    )


def test_vllm_defaults_apply_when_parameters_are_absent() -> None:
    sampling = plan({"text_input": "x"}).engine_request.sampling_params
    assert sampling.max_tokens == 16 and sampling.n == 1


def test_the_schemas_max_tokens_default_is_vllms() -> None:
    """app/schemas may not import vLLM, so it writes vLLM's default down: it must stay vLLM's."""
    assert SamplingParams().max_tokens == ENGINE_MAX_TOKENS


@pytest.mark.parametrize(
    ("limit", "parameters", "max_tokens"),
    [(2, {}, 2), (32, {}, 16), (None, {}, 16), (2, {"max_tokens": 1}, 1)],
    ids=["limit-below-the-default", "limit-above-the-default", "no-limit", "bounded"],
)
def test_a_request_that_sets_no_max_tokens_asks_vllms_default_within_the_limit(
    limit: int | None, parameters: dict[str, Any], max_tokens: int
) -> None:
    """MAX_TOKENS_LIMIT bounds what a request asks by default too (vLLM's 16, or the limit
    where it is lower), on every Triton frontend (they read their inputs alike)."""
    body = GenerateRequest.model_validate({"text_input": "x", "parameters": parameters})
    inputs = body_inputs(body, RequestLimits(max_tokens=limit))
    triton = triton_request(inputs, served(), StreamPolicy(default=False))
    sampling = to_sampling_params(triton.request.sampling, stream=False)
    assert sampling.max_tokens == max_tokens


def test_output_kind_follows_streaming() -> None:
    assert (
        plan({"text_input": "x"}, stream=True).engine_request.sampling_params.output_kind
        == RequestOutputKind.DELTA
    )
    assert (
        plan({"text_input": "x"}).engine_request.sampling_params.output_kind
        == RequestOutputKind.FINAL_ONLY
    )


def test_stream_precedence_top_level_then_parameters_then_route() -> None:
    assert plan({"text_input": "x", "parameters": {"stream": False}}, stream=True).stream is False
    assert plan(
        {"text_input": "x", "stream": True, "parameters": {"stream": False}}, stream=True
    ).stream
    assert plan({"text_input": "x"}, stream=True).stream


def test_prompt_is_prepended_unless_streaming_or_excluded() -> None:
    assert plan({"text_input": "x"}).prepend_input
    assert not plan({"text_input": "x", "exclude_input_in_output": True}).prepend_input
    assert not plan({"text_input": "x"}, stream=True).prepend_input


def test_streaming_with_input_in_output_is_rejected_like_the_backend() -> None:
    with pytest.raises(InvalidRequestError, match="exclude_input_in_output"):
        plan({"text_input": "x", "exclude_input_in_output": False}, stream=True)


def test_unknown_parameter_is_named_with_a_suggestion() -> None:
    with pytest.raises(InvalidRequestError, match=r"parameters\.temprature: .*'temperature'"):
        plan({"text_input": "x", "parameters": {"temprature": 1}})


def test_server_only_sampling_fields_cannot_be_set() -> None:
    with pytest.raises(InvalidRequestError, match=r"parameters\.output_kind"):
        plan({"text_input": "x", "parameters": {"output_kind": 1}})


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"allowed_token_ids": "5"},
            r"parameters\.allowed_token_ids: Expected `array \| null`, got `str`",
        ),
        ({"logit_bias": {"abc": 1.0}}, r"parameters\.logit_bias: "),
        ({"bad_words": ["x", 3]}, r"parameters\.bad_words: Expected `str`, got `int`"),
    ],
)
def test_parameters_our_schema_does_not_declare_get_vllms_types(
    parameters: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        plan({"text_input": "x", "parameters": parameters})


def test_parameters_our_schema_does_not_declare_pass_through_when_well_typed() -> None:
    result = plan(
        {"text_input": "x", "parameters": {"allowed_token_ids": [5, 6], "logit_bias": {"5": 2.0}}}
    )
    assert result.engine_request.sampling_params.allowed_token_ids == [5, 6]
    assert result.engine_request.sampling_params.logit_bias == {5: 2.0}


def test_vllm_validation_errors_become_400() -> None:
    with pytest.raises(InvalidRequestError, match="n must be 1 when using greedy sampling"):
        plan({"text_input": "x", "parameters": {"n": 2, "temperature": 0}})


def test_sampling_parameters_string_replaces_parameters() -> None:
    result = plan(
        {
            "text_input": "x",
            "sampling_parameters": json.dumps({"max_tokens": 3, "stop": ["z"]}),
            "parameters": {"max_tokens": 9},
        }
    )
    assert result.engine_request.sampling_params.max_tokens == 3


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{bad", "sampling_parameters: invalid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"top_p": 5}', "sampling_parameters.top_p"),
        ('{"stop": ["\\ud800"]}', r"sampling_parameters\.stop\[0\]: not valid Unicode"),
    ],
)
def test_bad_sampling_parameters_are_named(raw: str, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        plan({"text_input": "x", "sampling_parameters": raw})


def test_top_level_extras_are_parameters_as_in_triton() -> None:
    assert plan({"text_input": "x", "max_tokens": 4}).engine_request.sampling_params.max_tokens == 4
    with pytest.raises(InvalidRequestError, match="bogus"):
        plan({"text_input": "x", "bogus": 1})


def test_cumulative_logprob_asks_vllm_for_sampled_logprobs_only() -> None:
    result = plan({"text_input": "x", "return_cumulative_logprob": True})
    assert result.engine_request.sampling_params.logprobs == 0
    assert not result.logprobs_requested
    assert plan({"text_input": "x", "parameters": {"logprobs": 2}}).logprobs_requested


@pytest.mark.parametrize("key", ["structured_outputs", "guided_decoding"])
def test_structured_outputs_from_object_or_json_string(key: str) -> None:
    for value in ({"choice": ["yes", "no"]}, json.dumps({"choice": ["yes", "no"]})):
        sampling = plan(
            {"text_input": "x", "parameters": {key: value}}
        ).engine_request.sampling_params
        assert sampling.structured_outputs is not None
        assert sampling.structured_outputs.choice == ["yes", "no"]


def test_structured_outputs_json_string_with_a_lone_surrogate_is_refused() -> None:
    text = json.dumps({"choice": ["a", "\udfff"]})  # the escape, as a client sends it
    with pytest.raises(InvalidRequestError, match=r"structured_outputs\.choice\[1\]: not valid"):
        plan({"text_input": "x", "parameters": {"structured_outputs": text}})


def test_lora_errors_use_the_backend_messages(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match=r"^LoRA feature is not enabled\.$"):
        plan({"text_input": "x", "parameters": {"lora_name": "a"}})
    model = served(loras={"a": tmp_path / "a", "b": tmp_path / "b"})
    with pytest.raises(
        InvalidRequestError, match=r"^LoRA c is not supported, we currently support \['a', 'b'\]$"
    ):
        plan({"text_input": "x", "parameters": {"lora_name": "c"}}, model=model)
    lora = plan(
        {"text_input": "x", "parameters": {"lora_name": "b"}}, model=model
    ).engine_request.lora
    assert (lora.name, lora.int_id, lora.path) == ("b", 2, tmp_path / "b")


def png_base64() -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_images_decode_for_multimodal_models() -> None:
    images = plan(
        {"text_input": "x", "image": [png_base64()]}, model=served(images=True)
    ).engine_request.images
    assert len(images) == 1 and images[0].size == (4, 4) and images[0].mode == "RGB"


def test_bad_image_names_its_index() -> None:
    with pytest.raises(InvalidRequestError, match=r"^image\.1: not a base64-encoded image"):
        plan(
            {"text_input": "x", "image": [png_base64(), "bm90IGFuIGltYWdl"]},
            model=served(images=True),
        )


def test_text_only_model_refuses_images() -> None:
    with pytest.raises(InvalidRequestError, match="takes no images"):
        plan({"text_input": "x", "image": [png_base64()]})


def test_chat_template_per_model_with_request_override() -> None:
    assert (
        plan({"text_input": "hi"}, model=served(chat=True)).engine_request.prompt
        == "<user>hi</user><assistant>"
    )
    no_chat = {"text_input": "hi", "parameters": {"apply_chat_template": False}}
    assert plan(no_chat, model=served(chat=True)).engine_request.prompt == "hi"
    assert plan({"text_input": "hi"}).engine_request.prompt == "hi"


def test_every_request_gets_its_own_id() -> None:
    assert (
        plan({"text_input": "x"}).engine_request.request_id
        != plan({"text_input": "x"}).engine_request.request_id
    )
