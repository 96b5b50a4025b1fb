"""One access-log line per request, with its request id, model, token counts and timings."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pythonjsonlogger.json import JsonFormatter

logger = logging.getLogger("app.access")


@dataclass
class RequestLog:
    """What the access log says of one request: the frontend fills in the model part, the
    generation service counts the tokens (it is a `GenerationObserver`)."""

    request_id: str
    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    status: int = 0
    model: str | None = None
    version: str | None = None
    prompt_tokens: int | None = None
    generated_tokens: int = 0
    first_token_at: float | None = None
    prompt: str | None = None

    def record_chunk(self, num_prompt_tokens: int, num_new_tokens: int) -> None:
        """Called once per engine chunk: O(1)."""
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
            self.prompt_tokens = num_prompt_tokens
        self.generated_tokens += num_new_tokens

    def fields(self) -> dict[str, Any]:
        total_ms = (time.perf_counter() - self.started) * 1000
        ttft_ms = None if self.first_token_at is None else (self.first_token_at - self.started) * 1000
        data: dict[str, Any] = {
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "total_ms": round(total_ms, 1),
        }
        if self.model is not None:
            data.update(
                model=self.model,
                version=self.version,
                prompt_tokens=self.prompt_tokens,
                generated_tokens=self.generated_tokens,
                ttft_ms=None if ttft_ms is None else round(ttft_ms, 1),
            )
        if self.prompt is not None:
            data["prompt"] = self.prompt
        return data


def write_access_log(record: RequestLog, log_prompts: bool) -> None:
    """The request's one access-log line (its fields as JSON keys with `LOG_FORMAT=json`)."""
    if not log_prompts:
        record.prompt = None
    fields = record.fields()
    logger.info(format_plain(fields), extra={"access": fields})


def format_plain(data: dict[str, Any]) -> str:
    return " ".join(f"{key}={value}" for key, value in data.items() if value is not None)


class AccessJsonFormatter(JsonFormatter):
    """JSON lines; an access record's fields become top-level keys."""

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        access = log_data.pop("access", None)
        if access:
            log_data.pop("message", None)
            log_data.update(access)


def configure_logging(level: str, log_format: str) -> None:
    """Plain text by default; JSON lines (python-json-logger) when `log_format` is json."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(AccessJsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
