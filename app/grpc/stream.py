"""One `ModelStreamInfer` call: many requests multiplexed on one bidirectional stream.

Each request read runs in its own task and writes its responses as the engine produces them
(one write at a time); a bad request gets its error in `error_message` and the stream goes
on. When the client half-closes, the call ends after every request has finished; when it
cancels (or the server stops), every engine request the stream started is aborted.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import grpc
import grpc.aio
from tritonclient.grpc import service_pb2

from app.errors import ServerError
from app.grpc.observe import ACCESS_LOG_METHOD, GrpcMetrics
from app.grpc.requests import read_request
from app.grpc.responses import StreamResponses, echoed_id, error_response, mark_final
from app.grpc.status import status_code
from app.observability.access_log import RequestLog, write_access_log
from app.runtime import Runtime
from app.security.redaction import without_dumps
from app.triton.inputs import read_inputs
from app.triton.outputs import ResponseBuilder, formatted
from app.triton.request import StreamPolicy, triton_request

logger = logging.getLogger(__name__)

try:  # what grpc.aio's write raises on a call its client has cancelled, before the call knows
    from grpc._cython.cygrpc import ExecuteBatchError

    CALL_BROKEN: tuple[type[BaseException], ...] = (ExecuteBatchError,)
except ImportError:  # pragma: no cover - a grpcio that names it otherwise
    CALL_BROKEN = ()

STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
ONE_RESPONSE_UNLESS_STREAM = StreamPolicy(default=False)
"""The backend streams only when the `stream` input is true."""
CANCELLING = "[vllm] Cancelling the request"
CANCELLED = "[vllm] Successfully cancelled the request"
"""The backend's log lines on a cancelled request (its CI looks for them in the server log)."""


class StreamSession:
    """The requests of one stream, each in its own task, and the stream's one writer."""

    def __init__(
        self,
        runtime: Runtime,
        metrics: GrpcMetrics,
        context: grpc.aio.ServicerContext,
        log_prompts: bool,
        pin: str | None = None,
    ) -> None:
        self._runtime = runtime
        self._metrics = metrics
        self._context = context
        self._log_prompts = log_prompts
        self._write_lock = asyncio.Lock()
        self._broken = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._pin = pin
        """The instance the call's metadata pins its requests to, where pins are allowed."""

    async def run(self, requests: AsyncIterator[service_pb2.ModelInferRequest]) -> None:
        """Serve every request of the stream; return (status OK) once the client half-closed
        and all of them have finished."""
        try:
            async for request in requests:
                task = asyncio.create_task(self._serve(request))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            while self._tasks:
                await asyncio.wait(set(self._tasks))
        finally:
            await self._cancel_running()

    async def _cancel_running(self) -> None:
        """Abort what is still running (the client cancelled, or the server stops)."""
        running = [task for task in self._tasks if not task.done()]
        if not running:
            return
        logger.info("%s: %d running on a closed stream", CANCELLING, len(running))
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        logger.info("%s: %d aborted", CANCELLED, len(running))

    async def _serve(self, request: service_pb2.ModelInferRequest) -> None:
        """One request: its responses, or its error as a response; one access-log line and
        one count by the status it ended with (a request of a cancelled call: CANCELLED)."""
        log = RequestLog(
            request_id=echoed_id(request) or uuid.uuid4().hex,
            method=ACCESS_LOG_METHOD,
            path=STREAM_METHOD,
        )
        code = grpc.StatusCode.INTERNAL
        try:
            code = await self._answer(request, log)
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception:
            logger.exception("stream request %s: its error could not be written", log.request_id)
        finally:
            log.status = code.value[0]
            self._metrics.stream_request_ended(STREAM_METHOD, code)
            write_access_log(log, self._log_prompts)

    async def _answer(
        self, request: service_pb2.ModelInferRequest, log: RequestLog
    ) -> grpc.StatusCode:
        """The request's responses, or its error written as a response: the status it ended
        with. Whatever fails once the client has cancelled the call is the cancel's doing."""
        try:
            await self._generate(request, log)
            return grpc.StatusCode.OK
        except CallEnded:
            return grpc.StatusCode.CANCELLED
        except ServerError as exc:
            code, text, log.error = status_code(exc), exc.message, exc.detail
        except Exception as exc:
            if self._call_ended():
                return grpc.StatusCode.CANCELLED
            logger.exception("stream request %s failed", log.request_id)
            log.error = f"Error generating stream: {exc}"
            code, text = grpc.StatusCode.INTERNAL, without_dumps(log.error)
        try:
            await self._write(error_response(text, request, log.version or ""))
        except CallEnded:
            return grpc.StatusCode.CANCELLED
        return code

    async def _generate(self, request: service_pb2.ModelInferRequest, log: RequestLog) -> None:
        """Run the request through the core and write a response per chunk. The finished
        chunk's response is written final once the core has ended the request cleanly."""
        model = self._runtime.registry.get(request.model_name, request.model_version)
        log.model, log.version = model.name, model.version
        received = read_request(request)
        log.prompt = received.inputs.get("text_input")
        limits = self._runtime.generation.limits
        inputs = read_inputs(
            received.inputs,
            received.parameters,
            limits,
            None,
            received.requested_outputs,
            received.schedule,
        )
        triton = triton_request(inputs, model, ONE_RESPONSE_UNLESS_STREAM, limits)
        triton.request.instance_pin = self._pin
        builder = ResponseBuilder(triton, model.name, model.version, scalars=False)
        responses = StreamResponses(builder, request.id)
        chunks = self._runtime.generation.stream(model, triton.request, log)
        held: service_pb2.ModelStreamInferResponse | None = None
        try:
            async for chunk in chunks:
                if held is not None:
                    await self._write(held)
                    held = None
                message = await formatted(responses.response, chunk)
                if chunk.finished:
                    held = message
                else:
                    await self._write(message)
        finally:
            await chunks.aclose()
        if received.empty_final_response:
            if held is not None:
                await self._write(held)
            await self._write(responses.empty_final())
        else:
            await self._write(mark_final(held) if held is not None else responses.empty_final())

    async def _write(self, message: service_pb2.ModelStreamInferResponse) -> None:
        """One write at a time on the call (gRPC allows no concurrent writes); `CallEnded`
        when the client cancelled the call (before or during the write)."""
        async with self._write_lock:
            if self._call_ended():
                raise CallEnded()
            try:
                await self._context.write(message)
            except CALL_BROKEN as exc:
                self._broken = True
                raise CallEnded() from exc
            except Exception as exc:
                if self._call_ended():
                    raise CallEnded() from exc
                raise

    def _call_ended(self) -> bool:
        """The client cancelled the call, a write found it gone, or it ended otherwise:
        nothing more reaches the client."""
        return self._broken or self._context.cancelled() or self._context.done()


def metadata_value(context: grpc.aio.ServicerContext, key: str) -> str | None:
    """The call's metadata entry `key` (the first one), if it has one."""
    for entry_key, value in context.invocation_metadata() or ():
        if entry_key == key:
            return value if isinstance(value, str) else value.decode(errors="replace")
    return None


class CallEnded(Exception):
    """The stream's call ended (the client cancelled it) before a response could be written."""
