"""Target `ours-grpc`: the same workload over Triton's gRPC `ModelStreamInfer`, one call per
request on one shared channel, as perf_analyzer/genai-perf drive Triton (streaming, prompt
excluded), with grpc.aio and tritonclient's service definitions."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import AsyncIterator

import grpc
import grpc.aio
from tritonclient.grpc import service_pb2, service_pb2_grpc

from bench.servers import ServerProcess
from bench.targets import TargetError

MAX_MESSAGE_BYTES = 2**31 - 1
TOKENS_OUTPUT = "num_output_tokens"


def bytes_element(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<I", len(data)) + data


class OursGrpcTarget:
    """Our gRPC frontend: started by the bench (`server`, with its gRPC port) or running."""

    name = "ours-grpc"

    def __init__(self, model: str, grpc_url: str, server: ServerProcess | None) -> None:
        self.model = model
        self.grpc_url = grpc_url
        self.server = server
        self.channel: grpc.aio.Channel | None = None
        self.stub: service_pb2_grpc.GRPCInferenceServiceStub | None = None

    async def __aenter__(self) -> OursGrpcTarget:
        try:
            if self.server is not None:
                self.server.start()
                await self.server.wait_ready()
            self.channel = grpc.aio.insecure_channel(
                self.grpc_url,
                options=[
                    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ],
            )
            self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.channel is not None:
            await self.channel.close()
            self.channel = None
        if self.server is not None:
            self.server.stop()

    def request(self, prompt: str, max_tokens: int) -> service_pb2.ModelInferRequest:
        """`max_tokens` new tokens at temperature 0 with ignore_eos, no chat template (as the
        HTTP target asks), streamed, prompt excluded, with the token count of each response."""
        sampling = {
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0,
            "apply_chat_template": False,
        }
        request = service_pb2.ModelInferRequest(model_name=self.model, id=uuid.uuid4().hex)
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
        request.outputs.add(name=TOKENS_OUTPUT)
        return request

    async def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[int]:
        assert self.stub is not None, "target not started"
        call = self.stub.ModelStreamInfer(iter([self.request(prompt, max_tokens)]))
        try:
            async for response in call:
                if response.error_message:
                    raise TargetError(response.error_message[:200])
                infer = response.infer_response
                if infer.outputs:
                    (count,) = struct.unpack_from("<I", infer.raw_output_contents[0])
                    yield count
        except grpc.aio.AioRpcError as exc:
            raise TargetError(f"gRPC {exc.code().name}: {exc.details()}") from None
        finally:
            call.cancel()
