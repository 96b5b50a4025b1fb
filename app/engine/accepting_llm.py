"""vLLM's `AsyncLLM`, telling a request's frontend when the engine has taken the request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.v1.engine.async_llm import AsyncLLM


class AcceptingAsyncLLM(AsyncLLM):
    """`AsyncLLM` that calls the callback registered for a request id in `on_accepted` once
    `add_request` has returned: the prompt processed and checked, the request handed to the
    engine core. (`generate` calls `add_request` first, in vLLM 0.25 as in 0.32.) Errors
    before that are the request's own: a prompt too long, a parameter the model cannot use."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_accepted: dict[str, Callable[[], None]] = {}

    async def add_request(self, request_id: str, *args: Any, **kwargs: Any) -> Any:
        collector = await super().add_request(request_id, *args, **kwargs)
        accepted = self.on_accepted.pop(request_id, None)
        if accepted is not None:
            accepted()
        return collector
