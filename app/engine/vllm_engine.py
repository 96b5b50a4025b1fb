"""`InferenceEngine` backed by vLLM's `AsyncLLM`, running in this process's event loop."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import AsyncGenerator, Iterable
from typing import Any, TypeVar

import psutil
from vllm import SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.lora.request import LoRARequest
from vllm.usage.usage_lib import UsageContext
from vllm.v1.engine.exceptions import EngineDeadError

from app.core.load_view import EngineSignals
from app.core.migration import EngineHandover
from app.core.types import GenerationChunk, ValidRequest
from app.engine.capacity import admission_capacity
from app.engine.client_slot import ClientSlot, CoreBroker
from app.engine.freed_memory import return_freed_memory
from app.engine.grammars import ENGINE_ERROR, close_grammar_check, failure_of, grammar_check
from app.engine.metrics import MetricsProvider, NoVllmPrometheus
from app.engine.outputs import to_chunk
from app.engine.placement import starting_on
from app.engine.processes import engine_processes, kill_survivors
from app.engine.progress import StepCounter
from app.engine.ray_cluster import engine_group
from app.engine.resuming_client import ResumingRequest, can_migrate
from app.engine.routing_signals import SignalSource
from app.engine.sampling import to_sampling_params
from app.engine.shared_core import shared_engine_config
from app.engine.vllm_openai.acceptance import acceptance_key
from app.engine.vllm_openai.accepting_llm import AcceptingAsyncLLM
from app.engine.vllm_openai.options import engine_reasoning_parser, openai_options
from app.engine.vllm_openai.serving import EngineRequests, VllmOpenAIServing, check_tool_options
from app.errors import EngineUnhealthyError, InvalidRequestError, ModelConfigError, ServerError
from app.repository.layout import ModelSpec

logger = logging.getLogger(__name__)

Built = TypeVar("Built")

PREFIX_CHARS_PER_TOKEN = (6, 24)
"""`prefix_tokens` tokenizes this many characters per token wanted, then (where those were
too few) this many (tokens are shorter)."""

try:  # vLLM >= 0.11 splits client errors from server errors
    from vllm.exceptions import VLLMClientError
except ImportError:  # pragma: no cover - older vLLM
    VLLMClientError = ValueError  # type: ignore[misc,assignment]


class VllmEngine:
    """One `AsyncLLM` for one instance of a model version (`spec.instance`): with its own
    engine core, or as one client of a core shared by several frontend processes
    (`cores`)."""

    def __init__(
        self,
        spec: ModelSpec,
        cpu_kvcache_space_gib: int = 2,
        metrics: MetricsProvider | None = None,
        ray_address: str | None = None,
        cores: CoreBroker | None = None,
    ) -> None:
        self._spec = spec
        self._openai_options = openai_options(spec)
        engine_args = dict(spec.engine_args)
        config_path = spec.config_path
        try:
            check_tool_options(self._openai_options)
        except ModelConfigError as exc:
            raise ModelConfigError(f"{config_path}: {exc}") from exc
        reasoning_parser = engine_reasoning_parser(self._openai_options, engine_args, config_path)
        if reasoning_parser:
            engine_args["reasoning_parser"] = reasoning_parser
        self._engine_args = engine_args
        self._args = AsyncEngineArgs(**engine_args)
        self._group = engine_group(self._args, ray_address)
        self._cores = cores
        """Set when the engine core runs elsewhere, shared with other frontend processes."""
        self._slot: ClientSlot | None = None
        self._cpu_kvcache_space_gib = cpu_kvcache_space_gib
        self._metrics = (
            metrics if metrics is not None and not self._args.disable_log_stats else None
        )
        self._llm: AcceptingAsyncLLM | None = None
        self._creating: asyncio.Future[AcceptingAsyncLLM] | None = None
        self._processes: list[psutil.Process] = []
        self._tokenizer: Any = None
        self._openai: VllmOpenAIServing | None = None
        self._engine_requests = EngineRequests()
        self._steps = StepCounter()
        self.handover: EngineHandover | None = None
        """Set by supervision: running requests resume on the replacement when this dies."""
        self._signals = SignalSource(spec)
        self.routing_signals: EngineSignals | None = None
        """Its load reports and what its KV cache holds, for routing (once started)."""

    async def start(self) -> None:
        """Wait for the engine's Ray group to be whole (if on Ray), then build the engine in a
        worker thread. Cancelled meanwhile, the engine is still built (a thread cannot be
        interrupted); `shutdown` waits for it and stops it."""
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self._cpu_kvcache_space_gib))
        try:
            await self._group.start()
        except BaseException:
            await self._group.stop()
            raise
        if self._cores is not None:
            self._slot = await self._cores.acquire(self._signals.core_spec())
            self._signals.joined(self._slot)
        self._creating = asyncio.ensure_future(asyncio.to_thread(self._create_placed))
        self._llm = await asyncio.shield(self._creating)
        self._group.engine_built()
        self._processes = engine_processes(self._llm)
        self._steps.watch(self._llm)
        clients = self._slot.count if self._slot is not None else 1
        self.routing_signals = self._signals.started(self._llm.vllm_config, clients)
        tokenizer = self._llm.get_tokenizer()
        self._tokenizer = await tokenizer if inspect.isawaitable(tokenizer) else tokenizer
        try:
            self._openai = VllmOpenAIServing(
                self._llm,
                self._spec,
                self._openai_options,
                self._engine_requests,
                self._tokenizer,
                generate=self.outputs,
            )
        except ModelConfigError as exc:
            await self.shutdown()
            raise ModelConfigError(f"{self._spec.config_path}: {exc}") from exc
        await asyncio.to_thread(self._openai.warm_up)

    def engine_config(self) -> Any:
        """The engine's `VllmConfig` with the defaults `vllm serve` chooses for this hardware
        (its OpenAI-server usage context: e.g. 1,024 sequences and 8,192 batched tokens on an
        H100), wherever model.json does not set them. Built from fresh arguments: vLLM
        writes the defaults back into the ones it is given."""
        if self._slot is not None:
            return shared_engine_config(self._engine_args, self._slot.count, self._slot.index)
        args = AsyncEngineArgs(**self._signals.own_core_args(self._engine_args))
        return args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)

    def _create_placed(self) -> AcceptingAsyncLLM:
        """The engine, its processes started with the instance's environment (one engine
        start at a time in this process)."""
        with starting_on(self._spec.instance):
            return self._create()

    def _create(self) -> AcceptingAsyncLLM:
        config = self.engine_config()
        stat_loggers: list[Any] = [NoVllmPrometheus, self._signals.stat_logger()]
        if self._metrics is not None:
            families = self._metrics.families(config.model_config.max_model_len)
            stat_loggers.append(families.stat_logger_factory(*self._labels))
        client: dict[str, Any] = {}
        if self._slot is not None:
            client = {
                "client_addresses": self._slot.client_addresses(),
                "client_count": self._slot.count,
                "client_index": self._slot.index,
            }
        llm = AcceptingAsyncLLM.from_vllm_config(
            config,
            stat_loggers=stat_loggers,
            enable_log_requests=self._args.enable_log_requests,
            disable_log_stats=self._args.disable_log_stats,
            **client,
        )
        assert isinstance(llm, AcceptingAsyncLLM)  # vLLM's classmethod builds `cls`
        return llm

    async def shutdown(self) -> None:
        """Stop the engine (one still being built, once built): requests still waiting on it
        end with `EngineUnhealthyError`, and none of its processes is left running."""
        creating, self._creating = self._creating, None
        if creating is not None and self._llm is None:
            self._llm = await once_built(creating)
            self._processes = engine_processes(self._llm)
        llm, self._llm = self._llm, None
        self._openai = None
        if llm is not None:
            processor = getattr(llm, "output_processor", None)
            if processor is not None:
                processor.propagate_error(EngineDeadError())
            # AsyncLLM.shutdown stops the engine core before it cancels its output handler;
            # run in a thread, that handler would see the core die and log a false error.
            handler = getattr(llm, "output_handler", None)
            if handler is not None:
                handler.cancel()
            close_grammar_check(llm)
            await asyncio.to_thread(llm.shutdown)
            del llm, processor, handler
            kill_survivors(self._processes)
            return_freed_memory()
        await self._group.stop()
        self.routing_signals = None
        await self._signals.stop()
        slot, self._slot = self._slot, None
        if slot is not None and self._cores is not None:
            await self._cores.release(slot)
        if self._metrics is not None:
            self._metrics.clear_load(*self._labels)

    @property
    def _labels(self) -> tuple[str, str, str]:
        """Its `vllm:` series' labels: model, version, instance."""
        return self._spec.name, self._spec.version, str(self._spec.instance.index)

    @property
    def is_healthy(self) -> bool:
        return self._llm is not None and not self._llm.errored and self._group.intact

    async def ping(self, timeout: float) -> None:
        """A round trip to the engine core (it answers between two steps)."""
        if not self.is_healthy or self._llm is None:
            raise EngineUnhealthyError()
        try:
            await asyncio.wait_for(self._llm.is_sleeping(), timeout)
        except asyncio.TimeoutError:
            raise EngineUnhealthyError(f"the engine did not answer within {timeout:g} s") from None
        except Exception as exc:
            raise EngineUnhealthyError() from exc

    @property
    def progress(self) -> int:
        """Messages the engine core sent (a step each): moves while the engine steps."""
        return self._steps.steps

    @property
    def request_capacity(self) -> int | None:
        if self._llm is None:
            return None
        return admission_capacity(
            self._llm.vllm_config, self._slot.count if self._slot is not None else 1
        )

    @property
    def llm(self) -> AcceptingAsyncLLM | None:
        return self._llm

    def track(self, admitted_id: str, engine_ids: Iterable[str]) -> None:
        self._engine_requests.track(admitted_id, engine_ids)

    def untrack(self, admitted_id: str, engine_ids: Iterable[str]) -> None:
        self._engine_requests.untrack(admitted_id, engine_ids)

    def outputs(
        self, admitted_id: str, prompt: Any, params: SamplingParams, request_id: str, **kwargs: Any
    ) -> Any:
        """`AsyncLLM.generate`'s outputs for a request admitted as `admitted_id`; under
        supervision they resume on the replacement engine if this one dies."""
        if self.handover is not None and can_migrate(params):
            return ResumingRequest(self, admitted_id, prompt, params, request_id, kwargs).outputs()
        if self._llm is None:
            raise EngineDeadError()
        return self._llm.engine_generate(prompt, params, request_id, **kwargs)

    def _schedules_by_priority(self) -> bool:
        """model.json's `scheduling_policy` is priority (else, as Triton, priorities do nothing)."""
        config = getattr(self._llm, "vllm_config", None)
        return getattr(getattr(config, "scheduler_config", None), "policy", "fcfs") == "priority"

    @property
    def max_model_len(self) -> int:
        return self._llm.model_config.max_model_len if self._llm is not None else 0

    @property
    def max_logprobs(self) -> int:
        return self._llm.model_config.max_logprobs if self._llm is not None else -1

    @property
    def supports_images(self) -> bool:
        return self._llm is not None and bool(self._llm.model_config.is_multimodal_model)

    def render_chat_prompt(self, text: str) -> str:
        if self._tokenizer is None or not getattr(self._tokenizer, "chat_template", None):
            return text
        prompt: str = self._tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        return prompt

    def prefix_tokens(self, text: str, limit: int) -> list[int]:
        """The first `limit` tokens of `text` as the engine tokenizes it (special tokens
        included); only its leading characters are tokenized, a few per token first."""
        if self._tokenizer is None:
            return []
        ids: list[int] = []
        for chars_per_token in PREFIX_CHARS_PER_TOKEN:
            ids = list(self._tokenizer.encode(text[: limit * chars_per_token]))
            if len(ids) >= limit or len(text) <= limit * chars_per_token:
                break
        return ids[:limit]

    @property
    def openai_serving(self) -> VllmOpenAIServing | None:
        """vLLM's OpenAI API for this model (the OpenAI frontend's capability); None until
        started."""
        return self._openai

    async def abort(self, request_id: str) -> None:
        """Abort the request, and every engine request that the request admitted as
        `request_id` runs (an OpenAI request's, or a resumed request's on this engine)."""
        if self._llm is not None:
            await self._llm.abort([request_id, *self._engine_requests.get(request_id, ())])

    @property
    def num_unfinished_requests(self) -> int:
        """0 once the engine is dead: whatever it held is gone. (Asked of the output processor,
        as `AsyncLLM.get_num_unfinished_requests` does where it exists: vLLM 0.25 lacks it.)"""
        if self._llm is None or self._llm.errored:
            return 0
        return int(self._llm.output_processor.get_num_unfinished_requests())

    async def check_health(self) -> None:
        if self._llm is None:
            raise EngineUnhealthyError()
        self._group.check()
        try:
            await self._llm.check_health()
        except Exception as exc:
            raise EngineUnhealthyError() from exc

    async def generate(self, request: ValidRequest) -> AsyncGenerator[GenerationChunk, None]:
        if self._llm is None:
            raise EngineUnhealthyError()
        sampling_params = to_sampling_params(
            request.sampling, request.stream, request.parameters_field
        )
        await grammar_check(self._llm).check(sampling_params, request.parameters_field)
        prompt: dict[str, Any] = {"prompt": request.prompt}
        if request.images:
            prompt["multi_modal_data"] = {"image": request.images}
        lora = None
        if request.lora is not None:
            lora = LoRARequest(request.lora.name, request.lora.int_id, str(request.lora.path))
        accepted = acceptance_key(request.request_id, prompt)
        if request.on_accepted is not None:
            self._llm.on_accepted[accepted] = request.on_accepted
        schedule = {"priority": request.priority} if self._schedules_by_priority() else {}
        request_id = request.request_id
        outputs = self.outputs(
            request_id, prompt, sampling_params, request_id, lora_request=lora, **schedule
        )
        try:
            async for output in outputs:
                chunk = to_chunk(output)
                if output.finished:
                    check_not_failed(chunk, sampling_params, request.parameters_field)
                yield chunk
        except EngineDeadError as exc:
            raise EngineUnhealthyError() from exc
        except ServerError:
            raise
        except (VLLMClientError, ValueError) as exc:
            raise InvalidRequestError(str(exc)) from exc
        except Exception as exc:
            if self._llm is not None and self._llm.errored:
                raise EngineUnhealthyError() from exc
            cause = exc.__cause__ or exc
            logger.exception("request %s failed in the engine", request.request_id)
            raise ServerError(f"Error generating stream: {cause}") from exc
        finally:
            if self._llm is not None:
                self._llm.on_accepted.pop(accepted, None)
            await outputs.aclose()


def check_not_failed(chunk: GenerationChunk, sampling_params: SamplingParams, where: str) -> None:
    """vLLM ends a request it could not run with finish reason "error" (e.g. a grammar that
    passed its checks but failed to compile): an error, never a success."""
    if any(c.finish_reason == ENGINE_ERROR for c in chunk.completions):
        raise failure_of(sampling_params, where)


async def once_built(creating: asyncio.Future[Built]) -> Built | None:
    """The engine a start was building, once built; None when building it failed."""
    try:
        return await asyncio.shield(creating)
    except Exception:  # noqa: BLE001 - the start that was building it reports the failure
        return None
