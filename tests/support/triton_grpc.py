"""Triton gRPC clients as the vLLM backend's samples and CI tests use them: requests built
like its `create_vllm_request`, a sync stream collected through a callback, the asyncio
client's `stream_infer`, and the app with its gRPC frontend served in a thread."""

from __future__ import annotations

import json
import queue
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio
from fastapi import FastAPI

from app.main import create_app, create_grpc_server
from app.runtime import Runtime
from app.settings import Settings
from tests.support.asgi import free_ports, serve_in_thread

Result = tuple[Any, Any]
"""(InferResult or None, InferenceServerException or None), as the client's callback gets them."""


def bytes_input(name: str, values: list[str]) -> triton_grpc.InferInput:
    tensor = triton_grpc.InferInput(name, [len(values)], "BYTES")
    tensor.set_data_from_numpy(np.array([v.encode("utf-8") for v in values], dtype=np.object_))
    return tensor


def bool_input(name: str, value: bool) -> triton_grpc.InferInput:
    tensor = triton_grpc.InferInput(name, [1], "BOOL")
    tensor.set_data_from_numpy(np.array([value], dtype=bool))
    return tensor


def vllm_request(
    prompt: str,
    request_id: str = "",
    stream: bool = False,
    sampling_parameters: dict[str, Any] | None = None,
    model_name: str = "fake",
    send_parameters_as_tensor: bool = True,
    exclude_input_in_output: bool | None = None,
    outputs: Sequence[str] | None = ("text_output",),
    **flags: bool,
) -> dict[str, Any]:
    """One request as the backend's CI builds it: `text_input`, `stream`, the sampling
    parameters as a JSON tensor (and always as request parameters), optional BOOL inputs."""
    sampling = dict(sampling_parameters or {})
    inputs = [bytes_input("text_input", [prompt]), bool_input("stream", stream)]
    if send_parameters_as_tensor:
        inputs.append(bytes_input("sampling_parameters", [json.dumps(sampling)]))
    if exclude_input_in_output is not None:
        inputs.append(bool_input("exclude_input_in_output", exclude_input_in_output))
    inputs += [bool_input(name, value) for name, value in flags.items()]
    request: dict[str, Any] = {
        "model_name": model_name,
        "inputs": inputs,
        "request_id": request_id,
        "parameters": sampling,
    }
    if outputs:
        request["outputs"] = [triton_grpc.InferRequestedOutput(name) for name in outputs]
    return request


def stream_results(
    client: triton_grpc.InferenceServerClient, requests: list[dict[str, Any]], **stream_options: Any
) -> list[Result]:
    """Send every request on one stream, half-close, and return what the callback got."""
    received: queue.Queue[Result] = queue.Queue()
    client.start_stream(lambda result, error: received.put((result, error)), **stream_options)
    for request in requests:
        client.async_stream_infer(**request)
    client.stop_stream()
    return [received.get_nowait() for _ in range(received.qsize())]


async def aio_stream_results(
    client: triton_grpc_aio.InferenceServerClient,
    requests: list[dict[str, Any]],
    **stream_options: Any,
) -> list[Result]:
    """The same with the asyncio client's `stream_infer`, as the backend's samples/client.py."""

    async def inputs() -> AsyncIterator[dict[str, Any]]:
        for request in requests:
            yield request

    return [item async for item in client.stream_infer(inputs_iterator=inputs(), **stream_options)]


def by_id(results: list[Result]) -> dict[str, list[Any]]:
    """Successful results grouped by the response id (errors fail the caller's test)."""
    grouped: dict[str, list[Any]] = {}
    for result, error in results:
        assert error is None, error
        grouped.setdefault(result.get_response().id, []).append(result)
    return grouped


def text_of(results: list[Any]) -> str:
    return "".join(r.as_numpy("text_output")[0].decode("utf-8") for r in results)


def is_final(result: Any) -> bool:
    final: bool = result.get_response().parameters["triton_final_response"].bool_param
    return final


@dataclass
class GrpcApp:
    """The app served by uvicorn with its gRPC frontend in the same loop."""

    app: FastAPI
    http_url: str
    grpc_url: str

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime = self.app.state.runtime
        return runtime


@contextmanager
def serve_grpc_app(
    repository: Path, engine_factory: Callable[[Any], Any], **settings: Any
) -> Iterator[GrpcApp]:
    http_port, port = free_ports(2)
    config = Settings(model_repository=[repository], grpc_port=port, **settings)
    app = create_app(config, engine_factory=engine_factory)
    with serve_in_thread(app, create_grpc_server(config, app.state.runtime), http_port) as url:
        yield GrpcApp(app, url, f"127.0.0.1:{port}")
