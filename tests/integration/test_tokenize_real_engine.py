"""vLLM's utility routes against the real engine (the session's default server): a body vLLM
cannot render is the client's 400 with vLLM's reason, as on the generating routes, not a
500 (vLLM's tokenization code raises these errors rather than returning them)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

USER = {"role": "user", "content": "Hi"}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
UNRENDERABLE: list[tuple[str, dict[str, Any], str]] = [
    ("no_message", {"messages": []}, "Cannot apply chat template to an empty conversation"),
    (
        "template_argument_clash",
        {"messages": [USER], "chat_template_kwargs": {"messages": 1}},
        "got multiple values for keyword argument 'messages'",
    ),
    (
        "image_to_a_text_model",
        {"messages": [{"role": "user", "content": [IMAGE]}]},
        "smollm2 is not a multimodal model",
    ),
    (
        "processor_arguments",
        {"prompt": "Hi", "mm_processor_kwargs": {"size": 1}},
        "Per-request mm_processor_kwargs are disabled",
    ),
]


@pytest.mark.parametrize(
    ("name", "fields", "reason"), UNRENDERABLE, ids=[case[0] for case in UNRENDERABLE]
)
def test_a_body_vllm_cannot_render_is_a_400_with_its_reason(
    http: httpx.Client, name: str, fields: dict[str, Any], reason: str
) -> None:
    response = http.post("/tokenize", json={"model": "smollm2", **fields})
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert reason in error["message"] and error["type"] == "BadRequestError"
    chat = http.post("/v1/chat/completions", json={"model": "smollm2", "max_tokens": 1, **fields})
    if "messages" in fields:
        assert chat.status_code == 400 and reason in chat.json()["error"]["message"]


HUGE = "x y " * 1_900_000
"""7.6 MB: within the body limit, and 15 s of the tokenizer that the generating requests
share (a small completion sent meanwhile waited as long)."""
NEAR_LIMIT = " ".join(f"w{i % 997}" for i in range(30_000))
"""Just under vLLM's bound on a prompt for a 2,048-token context (165,888 characters)."""


@pytest.mark.parametrize("field", ["prompt", "messages"])
def test_a_prompt_longer_than_any_the_model_takes_is_refused_before_tokenizing(
    http: httpx.Client, field: str
) -> None:
    """vLLM bounds a generating request's prompt by its context times the characters of its
    longest token before tokenizing it; /tokenize is bounded alike. A prompt under the
    bound is counted whole, past the context if it is longer."""

    def tokenize(text: str) -> httpx.Response:
        value = text if field == "prompt" else [{"role": "user", "content": text}]
        return http.post("/tokenize", json={"model": "smollm2", field: value})

    refused = tokenize(HUGE)
    assert refused.status_code == 400, refused.text[:300]
    assert refused.json()["error"]["param"] == field
    assert "165888 characters" in refused.json()["error"]["message"]
    counted = tokenize(NEAR_LIMIT)
    assert counted.status_code == 200 and counted.json()["count"] > 2048
