"""`InferenceEngine` backed by vLLM's `AsyncLLM`, running in this process's event loop."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import AsyncIterator, Iterable
from typing import Any

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.lora.request import LoRARequest
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError

from app.core.types import CompletionDelta, GenerationChunk, GenerationRequest, TokenLogprobs
from app.engine.metrics import MetricsProvider
from app.engine.openai_options import engine_reasoning_parser, openai_options
from app.engine.openai_serving import EngineRequests, VllmOpenAIServing, check_tool_options
from app.engine.sampling import to_sampling_params
from app.errors import EngineUnhealthyError, InvalidRequestError, ModelConfigError, ServerError
from app.repository.layout import CONFIG_FILE, ModelSpec

logger = logging.getLogger(__name__)

try:  # vLLM >= 0.11 splits client errors from server errors
    from vllm.exceptions import VLLMClientError
except ImportError:  # pragma: no cover - older vLLM
    VLLMClientError = ValueError  # type: ignore[misc,assignment]


class VllmEngine:
    """One `AsyncLLM` for one model version."""

    def __init__(
        self,
        spec: ModelSpec,
        cpu_kvcache_space_gib: int = 2,
        metrics: MetricsProvider | None = None,
    ) -> None:
        self._spec = spec
        self._openai_options = openai_options(spec)
        engine_args = dict(spec.engine_args)
        config_path = spec.version_path.parent / CONFIG_FILE
        try:
            check_tool_options(self._openai_options)
        except ModelConfigError as exc:
            raise ModelConfigError(f"{config_path}: {exc}") from exc
        reasoning_parser = engine_reasoning_parser(self._openai_options, engine_args, config_path)
        if reasoning_parser:
            engine_args["reasoning_parser"] = reasoning_parser
        self._args = AsyncEngineArgs(**engine_args)
        self._cpu_kvcache_space_gib = cpu_kvcache_space_gib
        self._metrics = metrics if metrics is not None and not self._args.disable_log_stats else None
        self._llm: AsyncLLM | None = None
        self._tokenizer: Any = None
        self._openai: VllmOpenAIServing | None = None
        self._openai_requests: EngineRequests = {}

    async def start(self) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self._cpu_kvcache_space_gib))
        self._llm = await asyncio.to_thread(self._create)
        tokenizer = self._llm.get_tokenizer()
        self._tokenizer = await tokenizer if inspect.isawaitable(tokenizer) else tokenizer
        try:
            self._openai = VllmOpenAIServing(self._llm, self._spec, self._openai_options, self._openai_requests)
        except ModelConfigError as exc:
            await self.shutdown()
            raise ModelConfigError(f"{self._spec.version_path.parent / CONFIG_FILE}: {exc}") from exc

    def _create(self) -> AsyncLLM:
        config = self._args.create_engine_config()
        stat_loggers = None
        if self._metrics is not None:
            families = self._metrics.families(config.model_config.max_model_len)
            stat_loggers = [families.stat_logger_factory(self._spec.name, self._spec.version)]
        return AsyncLLM.from_vllm_config(
            config,
            stat_loggers=stat_loggers,
            enable_log_requests=self._args.enable_log_requests,
            disable_log_stats=self._args.disable_log_stats,
        )

    async def shutdown(self) -> None:
        llm, self._llm = self._llm, None
        self._openai = None
        if llm is not None:
            # AsyncLLM.shutdown stops the engine core before it cancels its output handler;
            # run in a thread, that handler would see the core die and log a false error.
            handler = getattr(llm, "output_handler", None)
            if handler is not None:
                handler.cancel()
            await asyncio.to_thread(llm.shutdown)
        if self._metrics is not None:
            self._metrics.remove(self._spec.name, self._spec.version)

    @property
    def is_healthy(self) -> bool:
        return self._llm is not None and not self._llm.errored

    @property
    def max_model_len(self) -> int:
        return self._llm.model_config.max_model_len if self._llm is not None else 0

    @property
    def supports_images(self) -> bool:
        return self._llm is not None and bool(self._llm.model_config.is_multimodal_model)

    def render_chat_prompt(self, text: str) -> str:
        if self._tokenizer is None or not getattr(self._tokenizer, "chat_template", None):
            return text
        return self._tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )

    @property
    def openai_serving(self) -> VllmOpenAIServing | None:
        """vLLM's OpenAI API for this model (the OpenAI frontend's capability); None until started."""
        return self._openai

    async def abort(self, request_id: str) -> None:
        """Abort the request, or every engine request an OpenAI request admitted as `request_id` runs."""
        if self._llm is not None:
            await self._llm.abort([request_id, *self._openai_requests.get(request_id, ())])

    @property
    def num_unfinished_requests(self) -> int:
        return 0 if self._llm is None else self._llm.get_num_unfinished_requests()

    async def check_health(self) -> None:
        if self._llm is None:
            raise EngineUnhealthyError()
        try:
            await self._llm.check_health()
        except Exception as exc:
            raise EngineUnhealthyError() from exc

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        if self._llm is None:
            raise EngineUnhealthyError()
        sampling_params = to_sampling_params(request.sampling, request.stream, request.parameters_field)
        prompt: dict[str, Any] = {"prompt": request.prompt}
        if request.images:
            prompt["multi_modal_data"] = {"image": request.images}
        lora = None
        if request.lora is not None:
            lora = LoRARequest(request.lora.name, request.lora.int_id, str(request.lora.path))
        outputs = self._llm.generate(prompt, sampling_params, request.request_id, lora_request=lora)
        try:
            async for output in outputs:
                yield to_chunk(output)
        except EngineDeadError as exc:
            raise EngineUnhealthyError() from exc
        except (VLLMClientError, ValueError) as exc:
            raise InvalidRequestError(str(exc)) from exc
        except Exception as exc:
            if self._llm is not None and self._llm.errored:
                raise EngineUnhealthyError() from exc
            cause = exc.__cause__ or exc
            logger.exception("request %s failed in the engine", request.request_id)
            raise ServerError(f"Error generating stream: {cause}") from exc
        finally:
            await outputs.aclose()


def to_chunk(output: Any) -> GenerationChunk:
    """A vLLM `RequestOutput` (DELTA or FINAL_ONLY) as an engine-neutral chunk."""
    return GenerationChunk(
        completions=[
            CompletionDelta(
                index=completion.index,
                text=completion.text,
                num_tokens=len(completion.token_ids),
                cumulative_logprob=completion.cumulative_logprob,
                logprobs=None if completion.logprobs is None else plain_logprobs(completion.logprobs),
                finish_reason=completion.finish_reason,
            )
            for completion in output.outputs
        ],
        num_prompt_tokens=len(output.prompt_token_ids or ()),
        finished=output.finished,
    )


def plain_logprobs(positions: Iterable[dict[int, Any]]) -> list[TokenLogprobs]:
    """vLLM's per-position `Logprob` objects as plain dicts, the backend's structure."""
    return [
        {
            token_id: {
                "logprob": entry.logprob,
                "rank": entry.rank,
                "decoded_token": entry.decoded_token,
            }
            for token_id, entry in position.items()
        }
        for position in positions
    ]
