"""The backend's output fields as `ModelStreamInferResponse` messages: typed output tensors
in `raw_output_contents`, the request's id, and `triton_final_response` on every response."""

from __future__ import annotations

from tritonclient.grpc import service_pb2

from app.core.types import GenerationChunk
from app.grpc.requests import InferOptions
from app.grpc.tensors import OUTPUT_DATATYPES, encode_output
from app.triton.inputs import OutputOptions, TritonRequest
from app.triton.outputs import ResponseBuilder

FINAL_RESPONSE = "triton_final_response"
SCALAR_OUTPUTS = frozenset({"num_input_tokens"})
"""Outputs the backend sends as 0-d arrays (shape `[]`); the others hold one value per
completion."""


def produced_outputs(options: OutputOptions) -> set[str]:
    """`text_output` always; each additional output only when its `return_*` input is true."""
    produced = {"text_output"}
    for name in (
        "finish_reason",
        "cumulative_logprob",
        "logprobs",
        "num_input_tokens",
        "num_output_tokens",
    ):
        if getattr(options, name):
            produced.add(name)
    return produced


class StreamResponses:
    """Builds one request's responses: a template of the fixed parts (names, datatypes,
    shapes, id) copied per chunk, and the chunk's fields encoded as raw tensors."""

    def __init__(
        self,
        request: TritonRequest,
        options: InferOptions,
        model_name: str,
        model_version: str,
        request_id: str,
    ) -> None:
        self._builder = ResponseBuilder(request, model_name, model_version, scalars=False)
        produced = produced_outputs(request.outputs)
        requested = options.requested_outputs
        self._outputs = [
            (name, datatype)
            for name, datatype in OUTPUT_DATATYPES.items()
            if name in produced and (not requested or name in requested)
        ]
        self._template = service_pb2.ModelInferResponse(
            model_name=model_name, model_version=model_version, id=request_id
        )
        self._template.parameters[FINAL_RESPONSE].bool_param = False
        for name, datatype in self._outputs:
            shape = [] if name in SCALAR_OUTPUTS else [request.n]
            self._template.outputs.add(name=name, datatype=datatype, shape=shape)

    def response(self, chunk: GenerationChunk) -> service_pb2.ModelStreamInferResponse:
        """The (not final) response for one chunk."""
        fields = self._builder.build(chunk)
        message = service_pb2.ModelStreamInferResponse()
        infer = message.infer_response
        infer.CopyFrom(self._template)
        infer.raw_output_contents.extend(
            [encode_output(datatype, fields[name]) for name, datatype in self._outputs]
        )
        return message

    def empty_final(self) -> service_pb2.ModelStreamInferResponse:
        """A final response without outputs (`triton_enable_empty_final_response`)."""
        message = service_pb2.ModelStreamInferResponse()
        infer = message.infer_response
        infer.model_name, infer.model_version, infer.id = (
            self._template.model_name,
            self._template.model_version,
            self._template.id,
        )
        return mark_final(message)


def mark_final(
    message: service_pb2.ModelStreamInferResponse,
) -> service_pb2.ModelStreamInferResponse:
    message.infer_response.parameters[FINAL_RESPONSE].bool_param = True
    return message


def error_response(
    text: str, request: service_pb2.ModelInferRequest, model_version: str = ""
) -> service_pb2.ModelStreamInferResponse:
    """A request's error in its stream: the message alone (no status code), the request's id
    and model, and the final flag; the stream goes on."""
    message = service_pb2.ModelStreamInferResponse(error_message=text)
    infer = message.infer_response
    infer.id, infer.model_name = request.id, request.model_name
    infer.model_version = model_version or request.model_version
    return mark_final(message)
