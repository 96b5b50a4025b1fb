"""The requests of the load generator (loadgen.py), one streamed request of each target kind:
Triton's generate_stream and OpenAI's /v1/completions over SSE, Triton's ModelStreamInfer over
gRPC (its request serialized as perf_analyzer sends it); each request's samples go to `out`."""

import asyncio
import json
import time
from typing import TYPE_CHECKING

# mypy reads the package branch (TYPE_CHECKING); at run time it is __package__'s choice
if TYPE_CHECKING or __package__:  # imported as bench.gpu.loadgen_requests
    from bench.gpu.loadgen_samples import count_error, record
else:  # beside loadgen.py run as a script: bench/gpu is sys.path[0]
    from loadgen_samples import count_error, record


def http_request_body(kind, model, prompt, args):
    """The streaming request of a target kind: Triton's generate_stream or OpenAI's completions."""
    if kind == "triton":
        return f"/v2/models/{model}/generate_stream", {
            "text_input": prompt,
            "parameters": {
                "stream": True,
                "max_tokens": args.tokens,
                "ignore_eos": True,
                "temperature": 0,
                **json.loads(args.triton_params),
            },
        }
    return "/v1/completions", {
        "model": model,
        "prompt": prompt,
        "max_tokens": args.tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }


async def http_request(client, kind, url, prompt, args, out):
    """One streamed request, its TTFT, token gaps and end-to-end time added to `out`."""
    path, body = http_request_body(kind, args.model, prompt, args)
    t0 = time.perf_counter()
    stamps = []
    try:
        async with client.stream("POST", url + path, json=body) as resp:
            if resp.status_code != 200:
                count_error(out)
                await resp.aread()
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    continue
                obj = json.loads(data)
                if "error" in obj:
                    count_error(out)
                    return
                stamps.append(time.perf_counter())
                t = obj.get("text_output", "") if kind == "triton" else obj["choices"][0]["text"]
                if not t:
                    out["empty_events"] += 1
    except Exception as e:  # noqa: BLE001 - count, keep going
        count_error(out, e)
        return
    record(out, t0, stamps)


def bytes_tensor(text):
    """One BYTES element as Triton's raw input contents carry it (tritonclient's serializer)."""
    import numpy as np
    from tritonclient.utils import serialize_byte_tensor

    return serialize_byte_tensor(np.array([text.encode("utf-8")], dtype=np.object_)).item()


def grpc_infer_request(model, prompt, args):
    """The request of the `grpc` kind: the SSE body's parameters as Triton's inputs, as
    perf_analyzer streams to Triton (`stream` true, the prompt left out of the output)."""
    from tritonclient.grpc import service_pb2

    sampling = {
        "max_tokens": args.tokens,
        "ignore_eos": True,
        "temperature": 0,
        **json.loads(args.triton_params),
    }
    request = service_pb2.ModelInferRequest(model_name=model)
    for name, datatype, data in (
        ("text_input", "BYTES", bytes_tensor(prompt)),
        ("sampling_parameters", "BYTES", bytes_tensor(json.dumps(sampling))),
        ("stream", "BOOL", b"\x01"),
        ("exclude_input_in_output", "BOOL", b"\x01"),
    ):
        request.inputs.add(name=name, datatype=datatype, shape=[1])
        request.raw_input_contents.append(data)
    return request


class GrpcChannels:
    """Channels to one server's gRPC port, a connection of its own each (gRPC would share one
    between channels of one process), one a worker as httpx keeps a connection a worker: the
    kernel spreads connections, not streams, over a server's frontend processes."""

    def __init__(self, address, count):
        import grpc.aio
        from tritonclient.grpc import service_pb2_grpc

        own_connection = [("grpc.use_local_subchannel_pool", 1)]
        self.channels = [
            grpc.aio.insecure_channel(address, options=own_connection) for _ in range(count)
        ]
        self.stubs = [service_pb2_grpc.GRPCInferenceServiceStub(ch) for ch in self.channels]

    async def ready(self):
        await asyncio.gather(*(ch.channel_ready() for ch in self.channels))

    def stub(self, wid):
        return self.stubs[wid % len(self.stubs)]

    async def close(self):
        await asyncio.gather(*(ch.close() for ch in self.channels))


async def grpc_request(stub, model, prompt, args, out):
    """One ModelStreamInfer call, its TTFT, token gaps and end-to-end time added to `out`."""
    t0 = time.perf_counter()
    stamps = []
    call = stub.ModelStreamInfer(iter([grpc_infer_request(model, prompt, args)]))
    try:
        async for response in call:
            if response.error_message:
                count_error(out)
                return
            stamps.append(time.perf_counter())
            contents = response.infer_response.raw_output_contents
            if not contents or len(contents[0]) <= 4:
                out["empty_events"] += 1
    except Exception as e:  # noqa: BLE001 - count, keep going
        count_error(out, e)
        return
    finally:
        call.cancel()
    record(out, t0, stamps)


async def send(client, channels, kind, url, prompt, args, out, wid):
    """One request of any server kind (`channels`: the gRPC channels of the target at `url`)."""
    if kind == "grpc":
        await grpc_request(channels[url].stub(wid), args.model, prompt, args, out)
    else:
        await http_request(client, kind, url, prompt, args, out)
