"""The vLLM adapter on its own: engine defaults, requests the engine failed, and the AsyncLLM
of the vLLM releases it runs on."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from vllm import SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.sampling_params import StructuredOutputsParams
from vllm.usage.usage_lib import UsageContext

from app.core.types import CompletionDelta, GenerationChunk
from app.engine.engine_args import vllm_engine_args
from app.engine.vllm_engine import VllmEngine, check_not_failed
from app.errors import InvalidRequestError, ServerError
from app.paths import PROJECT_ROOT
from app.repository.layout import load_repository


def default_spec(**engine_args: object):
    (spec,) = load_repository(PROJECT_ROOT / "configs" / "model_repository", None, vllm_engine_args)
    return dataclasses.replace(spec, engine_args={**spec.engine_args, **engine_args})


def test_engine_limits_are_those_vllm_serve_chooses_unless_model_json_sets_them() -> None:
    spec = default_spec()
    served = AsyncEngineArgs(**spec.engine_args).create_engine_config(
        usage_context=UsageContext.OPENAI_API_SERVER
    )
    ours = VllmEngine(spec).engine_config().scheduler_config
    assert (ours.max_num_seqs, ours.max_num_batched_tokens) == (
        served.scheduler_config.max_num_seqs,
        served.scheduler_config.max_num_batched_tokens,
    )
    pinned = (
        VllmEngine(default_spec(max_num_seqs=7, max_num_batched_tokens=4096))
        .engine_config()
        .scheduler_config
    )
    assert (pinned.max_num_seqs, pinned.max_num_batched_tokens) == (7, 4096)


def test_unfinished_requests_are_counted_on_an_asyncllm_without_get_num_unfinished_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM 0.25's AsyncLLM (the GPU runs' CUDA build) has no `get_num_unfinished_requests`:
    asking it made every /metrics scrape fail there."""
    engine = VllmEngine(default_spec())
    processor = SimpleNamespace(get_num_unfinished_requests=lambda: 3)
    monkeypatch.setattr(engine, "_llm", SimpleNamespace(errored=False, output_processor=processor))
    assert engine.num_unfinished_requests == 3
    monkeypatch.setattr(engine, "_llm", SimpleNamespace(errored=True, output_processor=processor))
    assert engine.num_unfinished_requests == 0


def finished(reason: str) -> GenerationChunk:
    return GenerationChunk(
        [CompletionDelta(index=0, text="", num_tokens=0, finish_reason=reason)], 3, True
    )


def test_an_engine_failure_with_a_grammar_is_the_clients_400() -> None:
    params = SamplingParams(structured_outputs=StructuredOutputsParams(regex=r"\p{Greek}+"))
    with pytest.raises(
        InvalidRequestError,
        match=r"^parameters\.structured_outputs: the engine could not use this grammar",
    ):
        check_not_failed(finished("error"), params, "parameters")


def test_an_engine_failure_without_a_grammar_is_a_server_error() -> None:
    with pytest.raises(ServerError, match="the engine could not run the request") as raised:
        check_not_failed(finished("error"), SamplingParams(), "parameters")
    assert type(raised.value) is ServerError


@pytest.mark.parametrize("reason", ["stop", "length", "abort"])
def test_other_finish_reasons_pass(reason: str) -> None:
    check_not_failed(finished(reason), SamplingParams(), "parameters")
