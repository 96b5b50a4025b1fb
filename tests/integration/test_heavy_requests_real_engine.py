"""No single request, of any size the body limit admits, stalls or bloats the server: each
one below, sent alone to the default server (the session's), gets a non-5xx answer, while
`/v2/health/live` answers within a second throughout and the server's processes grow by
less than 300 MB. Each is of a family that once froze the event loop (a 7 MB bad word: 17 s),
kept a core busy (a 100,000-entry choice list: 127 s, +465 MB kept), or left its request in
the engine client for good (a lone surrogate: a 500)."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import httpx
import psutil
import pytest

from tests.support.probe import readiness_probe
from tests.support.servers import RunningServer

LIVE_LIMIT_S = 1.0
OWN_BOUNDS = ("EngineCore", "grammar-worker")
"""Processes whose memory is bounded on its own (by process title)."""
GROWTH_LIMIT_MB = 300
HUGE = "x" * 7_000_000
"""Within the default body limit (8 MiB) with the rest of a body."""
WORDS = "a " * 3_500_000

NEAR_LIMIT = " ".join(f"w{i % 997}" for i in range(30_000))
"""Just under the characters vLLM lets through to its tokenizer for a 2,048-token context."""
LONG_PROMPT = "The quick brown fox, " * 380
"""1,901 tokens of the default model's 2,048."""

HEAVY: list[tuple[str, str, dict[str, Any]]] = [
    ("tokenized_prompt", "/v1/completions", {"prompt": NEAR_LIMIT}),
    (
        "templated_chat",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": NEAR_LIMIT}] * 2},
    ),
    ("triton_prompt", "/v2/models/smollm2/generate", {"text_input": WORDS}),
    ("openai_prompt", "/v1/completions", {"prompt": WORDS}),
    ("chat_message", "/v1/chat/completions", {"messages": [{"role": "user", "content": WORDS}]}),
    ("bad_word", "/v1/completions", {"prompt": "Hi", "bad_words": [HUGE]}),
    ("triton_bad_word", "/v2/models/smollm2/generate", {"text_input": "Hi", "bad_words": [HUGE]}),
    ("stop", "/v1/completions", {"prompt": "Hi", "stop": ["y" * 100_000] * 64}),
    (
        "choice",
        "/v1/completions",
        {"prompt": "Hi", "structured_outputs": {"choice": [f"c{i}" for i in range(500_000)]}},
    ),
    (
        "enum",
        "/v1/completions",
        {
            "prompt": "Hi",
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"enum": [f"v{i}" for i in range(400_000)]}},
            },
        },
    ),
    (
        "regex",
        "/v1/completions",
        {
            "prompt": "Hi",
            "structured_outputs": {"regex": "|".join(f"w{i}" for i in range(500_000))},
        },
    ),
    (
        "tools",
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "Hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": HUGE}}],
        },
    ),
    (
        "logit_bias",
        "/v1/completions",
        {"prompt": "Hi", "logit_bias": {str(i): 1 for i in range(4096)}},
    ),
    ("surrogate", "/v1/completions", {"prompt": "Hi", "stop": "\ud800"}),
    ("prompt_logprobs", "/v1/completions", {"prompt": LONG_PROMPT, "prompt_logprobs": 20}),
]


def body_of(path: str, fields: dict[str, Any]) -> bytes:
    """The request's JSON text (ASCII: a lone surrogate as the escape a client sends)."""
    if path.startswith("/v2/"):
        text_input = fields.pop("text_input")
        body: dict[str, Any] = {"text_input": text_input, "parameters": {"max_tokens": 1, **fields}}
    else:
        body = {"model": "smollm2", "max_tokens": 1, **fields}
    return json.dumps(body).encode()


def server_rss(server: RunningServer) -> int:
    """Resident bytes of the server's processes (the engine core's excepted: its memory is
    the KV cache's and the model's, set at start; and a grammar worker's, bounded by its own
    limit, GRAMMAR_WORKER_MEMORY_MB)."""
    root = psutil.Process(server.process.pid)
    children = root.children(recursive=True)
    processes = [root, *(p for p in children if not any(t in p.name() for t in OWN_BOUNDS))]
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += process.memory_info().rss
    return total


@pytest.fixture
def warmed(server: RunningServer, http: httpx.Client) -> RunningServer:
    """The server once each route has served a small request (what a first request loads,
    e.g. the chat template, is not the request's growth)."""
    small: list[tuple[str, dict[str, Any]]] = [
        ("/v1/completions", {"prompt": "Hi"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
        ("/v2/models/smollm2/generate", {"text_input": "Hi"}),
    ]
    for path, fields in small:
        http.post(path, content=body_of(path, dict(fields)))
    return server


@pytest.mark.parametrize(("name", "path", "fields"), HEAVY, ids=[case[0] for case in HEAVY])
def test_a_heavy_request_neither_stalls_nor_bloats_the_server(
    warmed: RunningServer, http: httpx.Client, name: str, path: str, fields: dict[str, Any]
) -> None:
    content = body_of(path, dict(fields))
    before = server_rss(warmed)
    with readiness_probe(warmed.base_url) as probe:
        started = time.perf_counter()
        response = http.post(path, content=content, headers={"content-type": "application/json"})
        seconds = time.perf_counter() - started
    grown_mb = (server_rss(warmed) - before) / 2**20
    print(
        f"\n{name}: {len(content)} bytes -> {response.status_code} in {seconds:.2f} s; "
        f"readiness worst {probe.worst:.2f} s; server grew {grown_mb:.0f} MB"
    )
    assert response.status_code < 500, response.text[:300]
    assert not probe.failures and probe.worst < LIVE_LIMIT_S, (probe.worst, probe.failures[:3])
    assert grown_mb < GROWTH_LIMIT_MB


def test_the_chat_renderer_is_warmed_up_before_the_server_serves(server: RunningServer) -> None:
    """As `vllm serve` does: the chat template is compiled and the model's processor loaded
    (0.4 s on the event loop of a 2-core host) before the first request, not by it."""
    log = server.log_path.read_text(errors="replace")
    warmed_up = log.find("Detected the chat template content format")
    assert 0 <= warmed_up < log.find("Application startup complete"), warmed_up


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("/v1/completions", {"prompt": "Hello world, how are you?"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello world"}]}),
    ],
    ids=["completion", "chat"],
)
def test_prompt_logprobs_name_each_prompt_token_and_its_alternatives(
    http: httpx.Client, path: str, fields: dict[str, Any]
) -> None:
    """Decoded off the event loop, they are what vLLM's output processor builds: an entry per
    prompt token after the first, holding that token (its text) and the top alternatives."""
    body = {"model": "smollm2", "max_tokens": 1, "prompt_logprobs": 2, **fields}
    response = http.post(path, json=body)
    assert response.status_code == 200, response.text[:300]
    answer = response.json()
    completion = path == "/v1/completions"
    entries = answer["choices"][0]["prompt_logprobs"] if completion else answer["prompt_logprobs"]
    assert len(entries) == answer["usage"]["prompt_tokens"] and entries[0] is None
    for entry in entries[1:]:
        assert 2 <= len(entry) <= 3
        assert all(isinstance(alternative["decoded_token"], str) for alternative in entry.values())
    own = [next(iter(entry.values()))["decoded_token"] for entry in entries[1:]]
    if completion:
        assert "Hello" + "".join(own) == fields["prompt"]
    else:
        assert "Hello world" in "".join(own)


def test_a_request_that_may_make_too_many_log_probabilities_is_refused_at_once(
    server: RunningServer, http: httpx.Client
) -> None:
    """MAX_LOGPROB_ENTRIES (default 4,194,304): 64 echoed prompts of up to the whole context
    x 16 choices x 21 log-probabilities (44 million, some 10 GB held) are refused before the
    engine takes them; the same batch of short prompts is served."""
    body = {"model": "smollm2", "max_tokens": 1, "echo": True, "logprobs": 20}
    with readiness_probe(server.base_url) as probe:
        started = time.perf_counter()
        refused = http.post(
            "/v1/completions", json={**body, "prompt": ["word " * 500] * 64, "n": 16}
        )
        seconds = time.perf_counter() - started
    assert refused.status_code == 400, refused.text[:300]
    error = refused.json()["error"]
    assert error["param"] == "echo"
    assert error["message"].startswith("echo: the request may make 44,061,696 log-probabilities")
    assert seconds < LIVE_LIMIT_S * 5 and not probe.failures and probe.worst < LIVE_LIMIT_S
    served = http.post("/v1/completions", json={**body, "prompt": ["Hi"] * 64})
    assert served.status_code == 200, served.text[:300]
    assert len(served.json()["choices"]) == 64


NAMED = [10, 20, 30, 40, 50]


def test_logprob_token_ids_are_the_alternatives_the_engine_computes(http: httpx.Client) -> None:
    """vLLM computes a log-probability for each token `logprob_token_ids` names, whatever
    `logprobs` says, so the bound counts them: 16 choices x 2,048 tokens x (128 + 1) are
    refused at once, on OpenAI's routes and Triton's."""
    named = {"logprobs": 1, "logprob_token_ids": NAMED, "max_tokens": 2}
    served = http.post("/v1/completions", json={"model": "smollm2", "prompt": "Hi", **named})
    assert served.status_code == 200, served.text[:300]
    for alternatives in served.json()["choices"][0]["logprobs"]["top_logprobs"]:
        assert len(alternatives) >= len(NAMED)
    many = {"n": 16, "max_tokens": 2048, "logprobs": 1, "logprob_token_ids": list(range(128))}
    refused = http.post("/v1/completions", json={"model": "smollm2", "prompt": "Hi", **many})
    assert refused.status_code == 400, refused.text[:300]
    assert refused.json()["error"]["param"] == "logprob_token_ids"
    del many["logprobs"]
    triton = http.post("/v2/models/smollm2/generate", json={"text_input": "Hi", "parameters": many})
    assert triton.status_code == 400, triton.text[:300]
    assert triton.json()["error"].startswith("parameters.logprob_token_ids: the request may make")
