"""One access-log line per request, with its request id, model, token counts and timings."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

from pythonjsonlogger.json import JsonFormatter

logger = logging.getLogger("app.access")

NEEDS_QUOTES = re.compile(r'[\s"=\\\x00-\x1f\x7f\x85\u2028\u2029]')
"""Characters that make a logfmt value ambiguous: whitespace, quotes, `=`, controls."""
UNSAFE = re.compile(r'["\\\x00-\x1f\x7f\x85\u2028\u2029]')
ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


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
    error: str | None = None
    """Why the request failed, also when it failed after a stream had started (status 200)."""

    def record_chunk(self, num_prompt_tokens: int, num_new_tokens: int) -> None:
        """Called once per engine chunk: O(1)."""
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
            self.prompt_tokens = num_prompt_tokens
        self.generated_tokens += num_new_tokens

    def fields(self) -> dict[str, Any]:
        total_ms = (time.perf_counter() - self.started) * 1000
        ttft_ms = (
            None if self.first_token_at is None else (self.first_token_at - self.started) * 1000
        )
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
        if self.error is not None:
            data["error"] = self.error
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
    """`key=value` pairs (logfmt): a value with a space, quote, `=` or control character is
    quoted and escaped, so that no client-sent text can forge a field or a log line."""
    return " ".join(
        f"{key}={plain_value(value)}" for key, value in data.items() if value is not None
    )


def plain_value(value: Any) -> str:
    text = str(value)
    if text and not NEEDS_QUOTES.search(text):
        return text
    return '"' + UNSAFE.sub(escape, text) + '"'


def escape(match: re.Match[str]) -> str:
    char = match.group()
    return ESCAPES.get(char) or f"\\u{ord(char):04x}"


class AccessJsonFormatter(JsonFormatter):
    """JSON lines; an access record's fields become top-level keys."""

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_data, record, message_dict)
        access = log_data.pop("access", None)
        if access:
            log_data.pop("message", None)
            log_data.update(access)
