"""What every answer of the fuzz tier is checked for, shared by its tests."""

from __future__ import annotations

import re
from typing import Any

import httpx


def without_binary(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {
            k: without_binary(v) for k, v in schema.items() if not (k == "format" and v == "binary")
        }
    if isinstance(schema, list):
        return [without_binary(item) for item in schema]
    return schema


def content_type(response: Any) -> str:
    """A response's content type (`requests`' headers, or schemathesis's lists of values)."""
    value = response.headers.get("content-type") or response.headers.get("Content-Type") or ""
    return value[0] if isinstance(value, list) else value


def error_shape_holds(path: str, response: Any) -> bool:
    """Errors are `{"error": "..."}` (Triton, KServe) or `{"error": {...}}` (OpenAI)."""
    if response.status_code < 400 or "json" not in content_type(response):
        return True
    body = response.json()
    if path.startswith("/v1/") or path in ("/tokenize", "/detokenize"):
        return isinstance(body.get("error"), dict) and bool(body["error"].get("message"))
    return isinstance(body.get("error"), str) and bool(body["error"])


def stream_statuses(http_url: str) -> dict[str, float]:
    """grpc_server_stream_requests_total and grpc_server_handled_total by code."""
    text = httpx.get(f"{http_url}/metrics", timeout=30).text
    found: dict[str, float] = {}
    pattern = (
        r'^(grpc_server_(?:stream_requests|handled)_total)\{[^}]*grpc_code="(\w+)"'
        r"[^}]*\} ([\d.e+]+)$"
    )
    for metric, code, value in re.findall(pattern, text, re.MULTILINE):
        found[f"{metric}:{code}"] = found.get(f"{metric}:{code}", 0) + float(value)
    return found
