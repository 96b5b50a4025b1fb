"""vLLM's `AsyncLLM`, telling a request's frontend when the engine has taken the request, and
running the engine requests vLLM's OpenAI serving code asks for through the request it
serves."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError

from app.engine.prompt_logprobs import defer_prompt_logprobs, with_prompt_logprobs_built
from app.engine.vllm_openai.acceptance import AcceptanceKey, acceptance_key
from app.engine.vllm_openai.guarded_request import SERVED_REQUEST


class AcceptingAsyncLLM(AsyncLLM):
    """`AsyncLLM` that calls the callback registered for a request in `on_accepted` (by
    `acceptance_key`: its id and its prompt) once `add_request` has returned: the prompt
    processed and checked, the request handed to the engine core. (`generate` calls
    `add_request` first, in vLLM 0.25 as in 0.32.) Errors before that are the request's own:
    a prompt too long, a parameter the model cannot use. Prompt log-probabilities are decoded
    off the event loop (app/engine/prompt_logprobs.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_accepted: dict[AcceptanceKey, Callable[[], None]] = {}
        defer_prompt_logprobs(self)

    def generate(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """An engine request vLLM's serving code asks for (its objects hold this engine): run
        through the OpenAI request they serve in this context (`serving`), if any."""
        request = SERVED_REQUEST.get()
        if request is None:
            return self.engine_generate(*args, **kwargs)
        return request.generate(*args, **kwargs)

    def engine_generate(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """`AsyncLLM.generate` itself: the server's own engine requests (the Triton path, an
        OpenAI request's guarded ones, a resumed request) whatever the context."""
        outputs = super().generate(*args, **kwargs)
        params = kwargs.get("sampling_params", args[1] if len(args) > 1 else None)
        if getattr(params, "prompt_logprobs", None) is None:
            return outputs
        return with_prompt_logprobs_built(outputs)

    async def add_request(self, request_id: str, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        collector = await super().add_request(request_id, prompt, *args, **kwargs)
        if self.errored:
            fail_taken_by_dead_engine(collector)
            return collector
        accepted = self.on_accepted.pop(acceptance_key(request_id, prompt), None)
        if accepted is not None:
            accepted()
        return collector


def fail_taken_by_dead_engine(collector: Any) -> None:
    """A request the engine took while it died: vLLM checks that it is alive before taking a
    request and tells the requests it holds when it dies, but one whose taking began before
    and ended after its death would wait for outputs for good. It gets the engine's death
    instead (and so resumes on the replacement, as the others do)."""
    collector.put(EngineDeadError())
