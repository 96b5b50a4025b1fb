"""An engine stand-in that produces tokens at a GPU's measured rate, on any host: vLLM's own
engine core (its scheduler, the KV-cache manager with prefix caching and LRU eviction, the KV
events and the scheduler stats) with the model replaced by a timer. Each step takes the time
a GPU took for such a step, from the recorded H100 runs (benchmarks/runs/):

    step ms = base + per sequence x sequences + per token x context tokens read
              + per prompt token x prompt tokens computed

so that frontends, routing and admission can be timed without a GPU, against our server and
`vllm serve` alike. Every request's tokens are one token id (`TOKEN_ID`); run it with
`ignore_eos`.

Given to vLLM as its executor (the engine arguments' `distributed_executor_backend`, by
qualified name: `bench.standin.StandInExecutor`, with `block_size` 16 as on a GPU and
`num_gpu_blocks_override` the KV cache's blocks). STANDIN_PROFILE picks the GPU shape
(bench/standin_profiles.py); STANDIN_SLOWDOWN stretches every step (for a host whose CPUs
cannot keep up with a GPU's pace: 10 runs a tenth as fast, the same in every other way).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
from vllm.v1.executor.abstract import Executor
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.outputs import ModelRunnerOutput

from bench.standin_profiles import profile_from_env

TOKEN_ID = 314
"""The one token every request produces (a word of SmolLM2's vocabulary, not an end)."""
DEFAULT_BLOCKS = 4096
LAYOUT = "NHD"


class StandInExecutor(Executor):
    """vLLM's executor interface, with a timer for a model."""

    uses_ray = False
    supports_pp = False

    def _init_executor(self) -> None:
        self.cost, self.slowdown = profile_from_env()
        self._tokens: dict[str, list[int]] = {}
        """Request id -> [prompt tokens, tokens produced]."""
        self._gpu_free_at = time.perf_counter()
        self.steps = 0

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        non_block: bool = False,
    ) -> Any:
        """The worker calls the engine core makes, answered as one worker would."""
        results = self._answer(method if isinstance(method, str) else "", args)
        if non_block:
            future: Future[list[Any]] = Future()
            future.set_result(results)
            return future
        return results

    def _answer(self, method: str, args: tuple[Any, ...]) -> list[Any]:
        if method == "get_kv_cache_spec":
            return [{"model.layers.0.self_attn.attn": self._spec()}]
        if method == "determine_available_memory":
            blocks = self.cache_config.num_gpu_blocks_override or DEFAULT_BLOCKS
            return [blocks * self._spec().page_size_bytes]
        if method == "get_supported_kv_cache_layouts":
            return [[LAYOUT]]
        if method == "get_supported_tasks":
            return [("generate",)]
        if method in ("compile_or_warm_up_model", "supports_draft_weight_updates"):
            return [] if method == "compile_or_warm_up_model" else [False]
        return [None]

    def _spec(self) -> FullAttentionSpec:
        model = self.model_config
        return FullAttentionSpec(
            block_size=self.cache_config.block_size,
            num_kv_heads=model.get_num_kv_heads(self.parallel_config),
            head_size=model.get_head_size(),
            dtype=model.dtype if isinstance(model.dtype, torch.dtype) else torch.bfloat16,
        )

    def execute_model(  # type: ignore[override]
        self, scheduler_output: Any, non_block: bool = False
    ) -> ModelRunnerOutput | Future[ModelRunnerOutput]:
        output = self.step(scheduler_output)
        if not non_block:
            return output
        future: Future[ModelRunnerOutput] = Future()
        future.set_result(output)
        return future

    def step(self, scheduled: Any) -> ModelRunnerOutput:
        """One step: the tokens each request gets, after the time the GPU would take."""
        for request_id in scheduled.finished_req_ids:
            self._tokens.pop(request_id, None)
        computed = {}
        for new in scheduled.scheduled_new_reqs:
            self._tokens[new.req_id] = [len(new.prompt_token_ids or ()), 0]
            computed[new.req_id] = new.num_computed_tokens
        cached = scheduled.scheduled_cached_reqs
        computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=False))
        request_ids, sampled = list(scheduled.num_scheduled_tokens), []
        context = prompt_tokens = 0
        for request_id in request_ids:
            count = scheduled.num_scheduled_tokens[request_id]
            done = computed.get(request_id, 0) + count
            prompt, produced = self._tokens.setdefault(request_id, [done, 0])
            prompt_tokens += max(0, min(done, prompt) - computed.get(request_id, 0))
            context += done
            finished_prefill = done >= prompt + produced
            sampled.append([TOKEN_ID] if finished_prefill else [])
            if finished_prefill:
                self._tokens[request_id][1] += 1
        self._wait(self.cost.ms(len(request_ids), context, prompt_tokens) * self.slowdown)
        self.steps += 1
        return ModelRunnerOutput(
            req_ids=request_ids,
            req_id_to_index={request_id: n for n, request_id in enumerate(request_ids)},
            sampled_token_ids=sampled,
        )

    def _wait(self, ms: float) -> None:
        """Until the GPU would finish this step: right after the last one where the CPU's
        work since took less than a step (as vLLM's async scheduling hides it), else from
        now."""
        now = time.perf_counter()
        seconds = ms / 1000
        start = self._gpu_free_at if now - self._gpu_free_at <= seconds else now
        self._gpu_free_at = start + seconds
        if self._gpu_free_at > now:
            time.sleep(self._gpu_free_at - now)

    def sample_tokens(self, grammar_output: Any, non_block: bool = False) -> Any:
        raise RuntimeError("the stand-in samples in execute_model")

    def take_draft_token_ids(self) -> None:
        return None

    def execute_dummy_batch(self) -> None:
        return None

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        return None
