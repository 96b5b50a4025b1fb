"""The settings that bound what one request, connection or body may cost the server (the
server's limit table: docs/limits.md); `SettingsFields` (app/settings_fields.py) has them
with every other setting."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class LimitFields(BaseSettings):
    """Request, body, grammar and connection limits, each with what it bounds."""

    max_pending_requests: int | None = Field(
        None,
        ge=0,
        description="Per model: requests admitted (running + queued) before 503; default: twice "
        "what its engines run at once (max_num_seqs, or their KV cache blocks if fewer); "
        "0: no limit.",
    )
    max_request_body_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        description="Largest HTTP request body; larger ones are refused 413.",
    )
    max_request_bytes_in_flight: int = Field(
        512 * 1024 * 1024,
        ge=1024,
        description="Bytes of request bodies a frontend process holds at once (the requests in "
        "progress); a body that would take it further is refused 503 with Retry-After.",
    )
    max_tokens_limit: int | None = Field(
        None,
        ge=1,
        description="Largest max_tokens a request may ask; one that sets none asks vLLM's "
        "default within it.",
    )
    max_n: int = Field(16, ge=1, description="Largest n a request may ask.")
    max_stop: int = Field(64, ge=0, description="Stop strings and bad words one request may give.")
    max_stop_bytes: int = Field(
        16384, ge=0, description="UTF-8 bytes of one request's stop strings and bad words together."
    )
    max_grammar_bytes: int = Field(
        65536,
        ge=0,
        description="Bytes of one request's grammar as JSON text (structured_outputs, "
        "response_format, guided_*, forced tools).",
    )
    max_token_ids: int = Field(
        4096, ge=0, description="Entries of one token-id list (allowed_token_ids, logit_bias, ...)."
    )
    max_images: int = Field(16, ge=0, description="Images one request may carry.")
    max_image_pixels: int = Field(
        4096 * 4096,
        ge=1,
        description="Pixels of one image (width x height), Triton's and OpenAI's (vLLM's "
        "VLLM_MAX_IMAGE_PIXELS, unless set).",
    )
    max_prompts: int = Field(64, ge=1, description="Prompts of one OpenAI completions request.")
    max_messages: int = Field(
        2048,
        ge=1,
        description="Messages of one OpenAI conversation (chat's messages, the Responses "
        "API's input items), as OpenAI's API bounds them.",
    )
    max_content_parts: int = Field(
        4096,
        ge=0,
        description="Content parts and tool calls of one OpenAI conversation's messages together.",
    )
    max_tools: int = Field(
        128, ge=0, description="Tools one OpenAI request may offer, as OpenAI's API bounds them."
    )
    max_repetition_pattern: int = Field(
        256,
        ge=0,
        description="Largest repetition_detection.max_pattern_size a request may ask (the "
        "engine tries each pattern size up to it at every step).",
    )
    max_logprob_entries: int = Field(
        4_194_304,
        ge=0,
        description="Log-probabilities one request may make: its choices x their tokens x "
        "(alternatives + 1), prompt log-probabilities included (held in memory until the "
        "response is written, some 220 bytes each).",
    )
    max_beam_search_positions: int = Field(
        67_108_864,
        ge=0,
        description="Token positions one OpenAI beam search (use_beam_search) may keep: its "
        "beams (n) x new tokens x (prompt + new tokens) for each prompt, as vLLM keeps every "
        "beam that ended (some 13 bytes each; it grows with the square of the new tokens).",
    )
    request_timeout_seconds: float | None = Field(
        None, gt=0, description="Abort requests running longer than this."
    )
    grammar_workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Processes per engine that compile structured-output grammars before the "
        "engine takes them (started on the first such request); a grammar waits for a free one.",
    )
    grammar_worker_memory_mb: int = Field(
        2048,
        ge=1024,
        description="Memory bound of each grammar worker (about 700 MB of it is the worker's "
        "own); a grammar whose compile needs more is refused 400.",
    )
    grammar_compile_timeout_seconds: float = Field(
        10,
        gt=0,
        description="Longest one grammar may take to compile; a grammar that takes longer is "
        "refused 400 and its worker replaced.",
    )
    http_header_timeout_seconds: float = Field(
        30,
        gt=0,
        description="A client must send a request's headers within this time, or is "
        "disconnected (a gRPC client: begin HTTP/2, and TLS, on a new connection).",
    )
    http_keep_alive_seconds: float = Field(
        75,
        gt=0,
        description="How long an idle HTTP connection stays open for the client's next request: "
        "longer than the idle timeouts of common clients and load balancers (60 s), so that "
        "they close it first and never send a request on a connection the server is closing.",
    )
    http_body_timeout_seconds: float = Field(
        60,
        gt=0,
        description="A request's whole body must arrive within this time of its headers, or "
        "the request is answered 408 and the connection closed.",
    )
    max_request_header_bytes: int = Field(
        64 * 1024,
        ge=1024,
        description="Largest request line and headers of an HTTP request; larger ones are "
        "refused 431 as they arrive.",
    )
    max_http_connections: int = Field(
        4096,
        ge=1,
        description="Open HTTP connections; one more closes the one waiting longest on its "
        "client (idle, or slow to send its request). Keep it below the open-file limit.",
    )
    max_grpc_connections: int = Field(
        4096,
        ge=1,
        description="Open gRPC connections; more are closed as they open, until one ends.",
    )
    max_grpc_calls: int = Field(
        4096,
        ge=1,
        description="gRPC calls open at once, streams included, on all connections; more are "
        "answered RESOURCE_EXHAUSTED.",
    )
