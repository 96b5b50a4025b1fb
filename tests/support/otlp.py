"""An OTLP/HTTP trace receiver for the tests: it takes `POST /v1/traces` (protobuf, as the
OpenTelemetry exporters send) and keeps every span it got."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

TRACES_PATH = "/v1/traces"


@dataclass
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    attributes: dict[str, Any]
    events: list[str]
    start_ns: int
    end_ns: int
    resource: dict[str, Any]
    status_code: int


@dataclass
class OtlpReceiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def wait_for(self, trace_id: str, count: int, timeout: float = 60.0) -> list[ReceivedSpan]:
        """The spans of a trace once at least `count` have arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            spans = self.of_trace(trace_id)
            if len(spans) >= count:
                return spans
            time.sleep(0.05)
        raise AssertionError(
            f"{len(self.of_trace(trace_id))} spans of trace {trace_id} after {timeout} s"
        )


def value_of(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def received_spans(request: ExportTraceServiceRequest) -> Iterator[ReceivedSpan]:
    for resource_spans in request.resource_spans:
        resource = {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    name=span.name,
                    attributes={kv.key: value_of(kv.value) for kv in span.attributes},
                    events=[event.name for event in span.events],
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    resource=resource,
                    status_code=span.status.code,
                )


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A receiver on a free port of 127.0.0.1, for as long as the block runs."""
    receiver: OtlpReceiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != TRACES_PATH:
                self.send_response(404)
                self.end_headers()
                return
            request = ExportTraceServiceRequest.FromString(body)
            with receiver.lock:
                receiver.spans.extend(received_spans(request))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = OtlpReceiver(f"http://127.0.0.1:{server.server_address[1]}{TRACES_PATH}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
