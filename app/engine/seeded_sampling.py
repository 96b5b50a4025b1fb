"""vLLM's CPU worker with seeded sampling that survives a split prompt.

When a batch holds a request whose prompt is only partly computed this step (chunked
prefill), vLLM samples a token for it anyway, discards it, and rewinds the request's seeded
generator so that its text does not depend on how the prompt was split: it moves a CUDA
generator's Philox offset back (`gpu_model_runner._bookkeeping_sync`). A CPU generator has no
offset, so vLLM 0.32's CPU engine core dies there ("CPU Generator does not use offset") on
the first seeded request that meets a busy step, and every request it held with it.

This worker's model runner saves the state of those generators before sampling and puts it
back afterwards: the same rewind, exact for any generator. The server names it as the CPU
engine's `worker_cls` (app/engine/cpu_defaults.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker

__all__ = ["SeededSamplingCPUWorker"]


class RewindingCPUModelRunner(CPUModelRunner):
    """`CPUModelRunner` whose discarded samples leave seeded generators as they were."""

    _states_before_sampling: dict[int, torch.Tensor]

    def _sample(self, logits: Any, spec_decode_metadata: Any) -> Any:
        generators = self.input_batch.generators
        self._states_before_sampling = {
            index: generators[index].get_state()
            for index in self._discarded_indices()
            if index in generators
        }
        return super()._sample(logits, spec_decode_metadata)

    def _bookkeeping_sync(self, *args: Any, **kwargs: Any) -> Any:
        """vLLM's bookkeeping with the discarded requests' generators rewound here, by their
        saved state, and kept out of its offset rewind."""
        generators = self.input_batch.generators
        saved = getattr(self, "_states_before_sampling", {})
        rewound = {index: generators.pop(index) for index in saved if index in generators}
        for index, generator in rewound.items():
            generator.set_state(saved[index])
        self._states_before_sampling = {}
        try:
            return super()._bookkeeping_sync(*args, **kwargs)
        finally:
            generators.update(rewound)

    def _discarded_indices(self) -> list[int]:
        """Batch rows whose sampled token this step is discarded (a prompt still in prefill)."""
        num_reqs = self.input_batch.num_reqs
        return [int(i) for i in np.nonzero(self.discard_request_mask.np[:num_reqs])[0]]


class SeededSamplingCPUWorker(CPUWorker):
    """vLLM's CPU worker, its (V1) model runner the rewinding one."""

    def init_device(self) -> None:
        super().init_device()  # type: ignore[no-untyped-call]
        if type(self.model_runner) is CPUModelRunner:
            self.model_runner.__class__ = RewindingCPUModelRunner
