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
from app.grpc.responses import StreamResponses, error_response, mark_final
from app.grpc.status import status_code
from app.observability.access_log import RequestLog, write_access_log
from app.runtime import Runtime
from app.triton.inputs import StreamPolicy, triton_request

logger = logging.getLogger(__name__)

STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
ONE_RESPONSE_UNLESS_STREAM = StreamPolicy(default=False)
"""The backend streams only when the `stream` input is true."""
CANCELLING = "[vllm] Cancelling the request"
CANCELLED = "[vllm] Successfully cancelled the request"
"""The backend's log lines on a cancelled request (its CI looks for them in the server log)."""


class StreamSession:
    """The requests of one stream, each in its own task, and the stream's one writer."""

    def __init__(
        self, runtime: Runtime, metrics: GrpcMetrics, context: grpc.aio.ServicerContext, log_prompts: bool
    ) -> None:
        self._runtime = runtime
        self._metrics = metrics
        self._context = context
        self._log_prompts = log_prompts
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

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
        """One request: its responses, or its error as a response; one access-log line."""
        log = RequestLog(request_id=request.id or uuid.uuid4().hex, method=ACCESS_LOG_METHOD, path=STREAM_METHOD)
        code = grpc.StatusCode.OK
        try:
            await self._generate(request, log)
        except ServerError as exc:
            code = status_code(exc)
            await self._write(error_response(exc.message, request, log.version or ""))
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception as exc:
            logger.exception("stream request %s failed", log.request_id)
            code = grpc.StatusCode.INTERNAL
            await self._write(error_response(f"Error generating stream: {exc}", request, log.version or ""))
        finally:
            log.status = code.value[0]
            self._metrics.stream_request_ended(STREAM_METHOD, code)
            write_access_log(log, self._log_prompts)

    async def _generate(self, request: service_pb2.ModelInferRequest, log: RequestLog) -> None:
        """Run the request through the core and write a response per chunk. The finished
        chunk's response is written final once the core has ended the request cleanly."""
        model = self._runtime.registry.get(request.model_name, request.model_version)
        log.model, log.version = model.name, model.version
        body, options = read_request(request)
        log.prompt = body.text_input
        triton = triton_request(body, model, ONE_RESPONSE_UNLESS_STREAM)
        responses = StreamResponses(triton, options, model.name, model.version, request.id)
        chunks = self._runtime.generation.generate(model, triton.generation, log)
        held: service_pb2.ModelStreamInferResponse | None = None
        try:
            async for chunk in chunks:
                if held is not None:
                    await self._write(held)
                    held = None
                message = responses.response(chunk)
                if chunk.finished:
                    held = message
                else:
                    await self._write(message)
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
        if options.empty_final_response:
            if held is not None:
                await self._write(held)
            await self._write(responses.empty_final())
        else:
            await self._write(mark_final(held) if held is not None else responses.empty_final())

    async def _write(self, message: service_pb2.ModelStreamInferResponse) -> None:
        """One write at a time on the call (gRPC allows no concurrent writes)."""
        async with self._write_lock:
            await self._context.write(message)
