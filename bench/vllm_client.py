"""`vllm bench serve`, vLLM's own benchmark client, with two more backends for the Triton
protocols it does not speak, and a common start for several client processes.

    python -m bench.vllm_client [--barrier FOLDER NAME] -- BENCH_SERVE_ARGS...

- `--backend triton-sse`: Triton's `generate_stream` (HTTP, SSE), `--endpoint
  /v2/models/MODEL/generate_stream`;
- `--backend triton-grpc`: Triton's gRPC `ModelStreamInfer`, a call per request, each call in
  flight on a connection of its own (as the HTTP backends hold one per request in flight);
  `--base-url` is then `grpc://host:port`.

Everything else (datasets, arrivals, concurrency, timing, the result file) is vLLM's code:
the backends only send a request and time its events, as vLLM's OpenAI backend does. With
`--barrier`, the client writes FOLDER/NAME.ready once its dataset is made and starts its run
when FOLDER/go appears, so that several client processes start together; the result gains
`t_end` (the run's end, Unix time) to merge them.
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

TOKENS_OUTPUT = "num_output_tokens"
MAX_MESSAGE_BYTES = 2**31 - 1


def triton_sampling(request_input: Any) -> dict[str, Any]:
    """The sampling parameters of a Triton request: the bench's new tokens, its extra body
    (temperature...), no chat template (the bench's prompts are final)."""
    sampling = {"max_tokens": request_input.output_len, "apply_chat_template": False}
    if request_input.ignore_eos:
        sampling["ignore_eos"] = True
    sampling.update(request_input.extra_body or {})
    return sampling


async def triton_sse(request_func_input: Any, session: Any, pbar: Any = None) -> Any:
    """One request to Triton's `generate_stream`, timed per event like vLLM's backends."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

    body = {
        "text_input": request_func_input.prompt,
        "parameters": triton_sampling(request_func_input),
        "return_num_output_tokens": True,
    }
    output = RequestFuncOutput(prompt_len=request_func_input.prompt_len)
    timer = EventTimer(output)
    try:
        async with session.post(url=request_func_input.api_url, json=body) as response:
            if response.status != 200:
                output.error = f"HTTP {response.status}: {(await response.text())[:200]}"
            else:
                async for line in response.content:
                    if line.startswith(b"data:"):
                        event = json.loads(line[5:])
                        if "error" in event:
                            output.error = str(event["error"])[:200]
                            break
                        timer.event(event.get("text_output", ""), int(event.get(TOKENS_OUTPUT, 0)))
                timer.finish()
    except Exception:  # noqa: BLE001 - a failed request is reported, as vLLM's backends do
        output.error = traceback.format_exc()
    if pbar:
        pbar.update(1)
    return output


class EventTimer:
    """TTFT, ITL and text of one streamed request, by vLLM's backends' rules: the first
    event with output is the first token, each later one an inter-token gap."""

    def __init__(self, output: Any) -> None:
        self.output = output
        self.started = self.latest = time.perf_counter()
        output.start_time = self.started
        self.text: list[str] = []

    def event(self, text: str, tokens: int) -> None:
        now = time.perf_counter()
        if tokens == 0 and not text:
            return
        if not self.text:
            self.output.ttft = now - self.started
        else:
            self.output.itl.append(now - self.latest)
        self.latest = now
        self.text.append(text)
        self.output.output_tokens += tokens

    def finish(self) -> None:
        output = self.output
        output.generated_text = "".join(self.text)
        output.latency = self.latest - self.started
        output.success = bool(self.text) and not output.error
        if not self.text and not output.error:
            output.error = "no event with output"


class GrpcChannels:
    """gRPC channels to one server: a call takes a free one or opens another, so that each
    call in flight has a connection of its own."""

    def __init__(self) -> None:
        self.free: dict[str, list[Any]] = {}
        self.opened = 0

    def take(self, target: str) -> Any:
        import grpc.aio
        from tritonclient.grpc import service_pb2_grpc

        free = self.free.setdefault(target, [])
        if free:
            return free.pop()
        self.opened += 1
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.use_local_subchannel_pool", 1),  # a connection per channel, not shared
        ]
        channel = grpc.aio.insecure_channel(target, options=options)
        return service_pb2_grpc.GRPCInferenceServiceStub(channel)

    def give_back(self, target: str, stub: Any) -> None:
        self.free[target].append(stub)


CHANNELS = GrpcChannels()


def bytes_element(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<I", len(data)) + data


def grpc_request(model: str, prompt: str, sampling: dict[str, Any]) -> Any:
    """A streamed `ModelInferRequest` as perf_analyzer and genai-perf send it to the vLLM
    backend: prompt excluded from the output, with each response's token count."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model, id=uuid.uuid4().hex)
    tensors = [
        ("text_input", "BYTES", bytes_element(prompt)),
        ("sampling_parameters", "BYTES", bytes_element(json.dumps(sampling))),
        ("stream", "BOOL", b"\x01"),
        ("exclude_input_in_output", "BOOL", b"\x01"),
        ("return_num_output_tokens", "BOOL", b"\x01"),
    ]
    for name, datatype, data in tensors:
        request.inputs.add(name=name, datatype=datatype, shape=[1])
        request.raw_input_contents.append(data)
    request.outputs.add(name="text_output")
    request.outputs.add(name=TOKENS_OUTPUT)
    return request


async def triton_grpc(request_func_input: Any, session: Any, pbar: Any = None) -> Any:
    """One request over Triton's gRPC `ModelStreamInfer`, timed per response."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

    target = request_func_input.api_url.removeprefix("grpc://").split("/", 1)[0]
    model = request_func_input.model_name or request_func_input.model
    request = grpc_request(model, request_func_input.prompt, triton_sampling(request_func_input))
    output = RequestFuncOutput(prompt_len=request_func_input.prompt_len)
    stub = CHANNELS.take(target)
    timer = EventTimer(output)
    call = stub.ModelStreamInfer(iter([request]))
    try:
        async for response in call:
            if response.error_message:
                output.error = response.error_message[:200]
                break
            text, tokens = response_fields(response.infer_response)
            timer.event(text, tokens)
        timer.finish()
    except Exception:  # noqa: BLE001 - a failed request is reported, as vLLM's backends do
        output.error = traceback.format_exc()
    finally:
        call.cancel()
        CHANNELS.give_back(target, stub)
    if pbar:
        pbar.update(1)
    return output


def response_fields(infer: Any) -> tuple[str, int]:
    """(text, new tokens) of one streamed response (the final, empty one: ("", 0))."""
    text, tokens = "", 0
    for tensor, raw in zip(infer.outputs, infer.raw_output_contents, strict=True):
        if tensor.name == "text_output" and len(raw) >= 4:
            (length,) = struct.unpack_from("<I", raw)
            text = raw[4 : 4 + length].decode("utf-8", errors="replace")
        elif tensor.name == TOKENS_OUTPUT and len(raw) >= 4:
            (tokens,) = struct.unpack_from("<i", raw)
    return text, tokens


BACKENDS = {"triton-sse": triton_sse, "triton-grpc": triton_grpc}


def register_backends() -> None:
    """Add the Triton backends to vLLM's table (read when the command line is parsed), among
    those that take sampling parameters (`--temperature`...: the vLLM backend reads them as
    vLLM's OpenAI server does)."""
    from vllm.benchmarks.lib import endpoint_request_func

    endpoint_request_func.ASYNC_REQUEST_FUNCS.update(BACKENDS)
    compatible = endpoint_request_func.OPENAI_COMPATIBLE_BACKENDS
    compatible.extend(name for name in BACKENDS if name not in compatible)


def start_together(barrier: tuple[Path, str] | None) -> None:
    """Make vLLM's measured run wait at the barrier and note when it ended (`t_end`)."""
    import vllm.benchmarks.serve as serve

    measured = serve.benchmark

    async def timed(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if barrier is not None:
            folder, name = barrier
            (folder / f"{name}.ready").touch()
            while not (folder / "go").exists():  # noqa: ASYNC110 - the file another process makes
                await asyncio.sleep(0.01)
        result: dict[str, Any] = await measured(*args, **kwargs)
        result["t_end"] = time.time()
        return result

    serve.benchmark = timed


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    barrier = None
    if argv[:1] == ["--barrier"]:
        barrier, argv = (Path(argv[1]), argv[2]), argv[3:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    register_backends()
    start_together(barrier)
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "bench", "serve", *argv]
    vllm_main()


if __name__ == "__main__":
    main()
