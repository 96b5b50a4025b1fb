"""The backend's outputs as `ModelStreamInferResponse` messages: typed output tensors in
`raw_output_contents`, the request's id, and `triton_final_response` on every response."""

from __future__ import annotations

from tritonclient.grpc import service_pb2

from app.core.limits import MAX_NAME_LENGTH
from app.core.types import GenerationChunk
from app.grpc.tensors import encode_output
from app.triton.outputs import ResponseBuilder

FINAL_RESPONSE = "triton_final_response"


class StreamResponses:
    """Builds one request's responses: a template of the fixed parts (names, datatypes,
    shapes, id) copied per chunk, and the values of the chunk's outputs encoded as raw
    tensors. An output of one value per request has the backend's shape `[]`; the others
    hold one value per completion."""

    def __init__(self, builder: ResponseBuilder, request_id: str) -> None:
        self._builder = builder
        self._datatypes = [output.datatype for output in builder.outputs]
        self._template = service_pb2.ModelInferResponse(
            model_name=builder.model_name, model_version=builder.model_version, id=request_id
        )
        self._template.parameters[FINAL_RESPONSE].bool_param = False
        for output in builder.outputs:
            shape = [builder.n] if output.per_completion else []
            self._template.outputs.add(name=output.name, datatype=output.datatype, shape=shape)

    def response(self, chunk: GenerationChunk) -> service_pb2.ModelStreamInferResponse:
        """The (not final) response for one chunk."""
        values = self._builder.values(chunk)
        message = service_pb2.ModelStreamInferResponse()
        infer = message.infer_response
        infer.CopyFrom(self._template)
        infer.raw_output_contents.extend(
            [
                encode_output(datatype, value)
                for datatype, value in zip(self._datatypes, values, strict=True)
            ]
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
    infer.id, infer.model_name = echoed_id(request), request.model_name
    infer.model_version = model_version or request.model_version
    return mark_final(message)


def echoed_id(request: service_pb2.ModelInferRequest) -> str:
    """The request's id as its responses and its access-log line repeat it (Triton echoes it
    in every response); one too long to repeat (`read_request` refuses it) is not."""
    return request.id if len(request.id) <= MAX_NAME_LENGTH else ""
