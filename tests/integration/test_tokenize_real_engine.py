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
