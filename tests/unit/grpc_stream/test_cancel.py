"""ModelStreamInfer's cancellation: a cancelled stream aborts every engine request, a write
racing the client's cancel counts as a cancel (a failing write on a live call as an error),
and many streams cancelled at random points count only cancels."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tritonclient.grpc as triton_grpc
from prometheus_client import CollectorRegistry
from tritonclient.grpc import service_pb2

from app.core.service import GenerationService
from app.grpc.observe import GrpcMetrics
from app.grpc.stream import StreamSession
from app.repository.layout import ModelSpec
from app.repository.served_model import ModelState, ServedModel
from tests.doubles import FakeEngine
from tests.support.triton_grpc import (
    serve_grpc_app,
    vllm_request,
)
from tests.support.waiting import wait_until


def test_cancelling_the_stream_aborts_every_engine_request(repository: Path) -> None:
    engine = FakeEngine(step_delay=0.05)
    with (
        serve_grpc_app(repository, lambda spec: engine) as app,
        triton_grpc.InferenceServerClient(app.grpc_url) as client,
    ):
        client.start_stream(lambda result, error: None)
        for index in range(5):
            client.async_stream_infer(
                **vllm_request(
                    "x",
                    str(index),
                    stream=True,
                    exclude_input_in_output=True,
                    sampling_parameters={"max_tokens": "200"},
                )
            )
        wait_until(lambda: len(engine.active) == 5)
        client.stop_stream(cancel_requests=True)
        wait_until(lambda: not engine.active)
        assert len(engine.aborted) == 5
        assert not any(model.in_flight for model in app.runtime.registry)


class CancellingContext:
    """A call's context whose client cancels while response `cancel_at` is being written:
    that write fails (as grpc.aio's does on a cancelled call); `broken` fails every write
    without a cancel (a genuine failure)."""

    def __init__(self, cancel_at: int | None = None, broken: bool = False) -> None:
        self.written: list[service_pb2.ModelStreamInferResponse] = []
        self._cancel_at = cancel_at
        self._broken = broken
        self._cancelled = False

    async def write(self, message: service_pb2.ModelStreamInferResponse) -> None:
        if self._broken or len(self.written) == self._cancel_at:
            self._cancelled = not self._broken
            raise RuntimeError("write failed")
        self.written.append(message)

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return False


def stream_session(engine: FakeEngine, context: CancellingContext) -> tuple[Any, GrpcMetrics]:
    spec = ModelSpec(name="fake", version="1", version_path=Path("."), engine_args={})
    model = ServedModel(spec=spec, engine=engine, state=ModelState.READY)
    runtime = SimpleNamespace(
        registry=SimpleNamespace(get=lambda name, version: model), generation=GenerationService()
    )
    metrics = GrpcMetrics(CollectorRegistry())
    return StreamSession(runtime, metrics, context, log_prompts=False), metrics  # type: ignore[arg-type]


def streaming_request(request_id: str) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="fake", id=request_id)
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    request.inputs.add(name="stream", datatype="BOOL", shape=[1])
    request.inputs.add(name="exclude_input_in_output", datatype="BOOL", shape=[1])
    request.raw_input_contents.extend([len(b"Hi").to_bytes(4, "little") + b"Hi", b"\x01", b"\x01"])
    return request


def stream_counts(metrics: GrpcMetrics) -> dict[str, float]:
    return {
        sample.labels["grpc_code"]: sample.value
        for family in metrics.stream_requests.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def one_request(
    request: service_pb2.ModelInferRequest,
) -> AsyncIterator[service_pb2.ModelInferRequest]:
    yield request


async def test_a_write_racing_the_clients_cancel_is_a_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client cancels while a response is being written: the request counts as
    CANCELLED, nothing is logged as a failure, no error response is attempted, and the
    engine request is aborted."""
    engine = FakeEngine(step_delay=0.01)
    context = CancellingContext(cancel_at=2)
    session, metrics = stream_session(engine, context)
    with caplog.at_level(logging.INFO):
        await session.run(one_request(streaming_request("r")))
    assert stream_counts(metrics) == {"CANCELLED": 1.0}
    assert len(context.written) == 2 and not any(
        message.error_message for message in context.written
    )
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert engine.aborted and not engine.active


async def test_a_write_failing_on_a_live_call_is_still_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = FakeEngine(step_delay=0.01)
    session, metrics = stream_session(engine, CancellingContext(broken=True))
    with caplog.at_level(logging.INFO):
        await session.run(one_request(streaming_request("r")))
    assert stream_counts(metrics) == {"INTERNAL": 1.0}
    assert any(
        "failed" in record.getMessage()
        for record in caplog.records
        if record.levelno == logging.ERROR
    )


def test_many_cancelled_streams_count_only_cancels(
    repository: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """200 streams cancelled at random points of a fast stream: each request read counts
    CANCELLED (or OK when it finished first), each call too (a call cancelled before the
    server saw it counts nowhere), never INTERNAL or UNKNOWN; nothing is logged as a failure
    and no engine request is left."""
    engine = FakeEngine()
    with caplog.at_level(logging.INFO), serve_grpc_app(repository, lambda spec: engine) as app:
        for index in range(200):
            with triton_grpc.InferenceServerClient(app.grpc_url) as client:
                client.start_stream(lambda result, error: None)
                client.async_stream_infer(
                    **vllm_request(
                        "x",
                        str(index),
                        stream=True,
                        exclude_input_in_output=True,
                        sampling_parameters={"max_tokens": "50"},
                    )
                )
                time.sleep(random.Random(index).uniform(0, 0.004))
                client.stop_stream(cancel_requests=True)
        wait_until(lambda: not engine.active)
        registry = app.runtime.metrics_registry

        def counts(metric: str) -> dict[str, float]:
            labels = {
                "grpc_service": "inference.GRPCInferenceService",
                "grpc_method": "ModelStreamInfer",
            }
            found = {
                code: registry.get_sample_value(metric, {**labels, "grpc_code": code})
                for code in CODES
            }
            return {code: value for code, value in found.items() if value}

        wait_until(lambda: sum(counts("grpc_server_handled_total").values()) >= 190)
        requests, calls = (
            counts("grpc_server_stream_requests_total"),
            counts("grpc_server_handled_total"),
        )
        assert set(requests) <= {"OK", "CANCELLED"} and 150 <= sum(requests.values()) <= 200, (
            requests
        )
        assert set(calls) <= {"OK", "CANCELLED"}, calls
        assert not any(model.in_flight for model in app.runtime.registry)
    assert not [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("app")
    ]


CODES = ("OK", "CANCELLED", "INTERNAL", "UNKNOWN")
