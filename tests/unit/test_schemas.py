"""The wire schemas accept what Triton accepts and name the field of every rejection."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.errors import InvalidRequestError
from app.schemas.generate import GenerateRequest, SamplingParameters
from app.schemas.validation import format_validation_errors, json_object_text, may_hold_surrogates


def errors_of(raw: str) -> str:
    with pytest.raises(ValidationError) as info:
        GenerateRequest.model_validate_json(raw)
    return format_validation_errors(info.value.errors())


def test_minimal_body_is_valid() -> None:
    body = GenerateRequest.model_validate_json('{"text_input": "hi"}')
    assert body.text_input == "hi"
    assert body.parameters is None and body.stream is None


def test_text_input_is_required_and_named() -> None:
    assert errors_of("{}") == "text_input: Field required"


def test_text_input_must_be_a_string() -> None:
    assert errors_of('{"text_input": 5}').startswith("text_input: Input should be a valid string")


def test_boolean_inputs_must_be_json_booleans() -> None:
    message = errors_of('{"text_input": "x", "return_finish_reason": "yes"}')
    assert message.startswith("return_finish_reason: Input should be a valid boolean")


def test_parameter_errors_name_the_nested_field() -> None:
    message = errors_of('{"text_input": "x", "parameters": {"temperature": "hot"}}')
    assert message.startswith("parameters.temperature: Input should be a valid number")


def test_out_of_range_parameters_are_rejected() -> None:
    assert "parameters.top_p" in errors_of('{"text_input": "x", "parameters": {"top_p": 2}}')
    assert "parameters.max_tokens" in errors_of(
        '{"text_input": "x", "parameters": {"max_tokens": 0}}'
    )
    assert "parameters.n" in errors_of('{"text_input": "x", "parameters": {"n": 0}}')


def test_numeric_strings_convert_as_the_backend_converts_them() -> None:
    params = SamplingParameters.model_validate({"temperature": "0.5", "max_tokens": "8"})
    assert params.temperature == 0.5 and params.max_tokens == 8


def test_invalid_json_is_named() -> None:
    assert errors_of("{not json").startswith("body: Invalid JSON")


def test_nan_and_infinity_are_rejected() -> None:
    with pytest.raises(ValidationError):
        SamplingParameters.model_validate({"temperature": float("nan")})
    with pytest.raises(ValidationError):
        SamplingParameters.model_validate({"top_p": float("inf")})


def test_image_accepts_a_list_or_one_string() -> None:
    assert GenerateRequest.model_validate({"text_input": "x", "image": ["a"]}).image == ["a"]
    assert GenerateRequest.model_validate({"text_input": "x", "image": "a"}).image == "a"


def test_unknown_top_level_keys_are_kept_as_extras() -> None:
    body = GenerateRequest.model_validate({"text_input": "x", "temperature": 0})
    assert body.model_extra == {"temperature": 0}


@pytest.mark.parametrize(
    ("text", "may_hold"),
    [
        ('{"stop": ["x"]}', False),
        ('{"stop": "\\ud800"}', True),
        ('{"stop": "\\uDE00"}', True),
        ('{"stop": "\\u00e9"}', False),
        ('{"stop": "é"}', True),
    ],
)
def test_only_json_that_can_hold_a_surrogate_is_walked(text: str, may_hold: bool) -> None:
    assert may_hold_surrogates(text) is may_hold
    assert may_hold_surrogates(text.encode()) is may_hold


def test_a_lone_surrogate_escape_in_json_text_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidRequestError) as raised:
        json_object_text('{"stop": ["\\ud800"]}', "sampling_parameters")
    assert raised.value.message == (
        "sampling_parameters.stop[0]: not valid Unicode text (a lone surrogate)"
    )
    assert json_object_text('{"stop": ["\\ud83d\\ude00"]}', "sampling_parameters") == {
        "stop": ["\U0001f600"]
    }
