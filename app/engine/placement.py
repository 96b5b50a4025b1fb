"""Where an instance's engine runs: the process environment vLLM's engine core and workers
read when they start (`CUDA_VISIBLE_DEVICES` for a KIND_GPU instance, as the backend sets it;
`VLLM_CPU_OMP_THREADS_BIND` for one of several KIND_CPU instances), and, as `vllm serve`
sets it, `spawn` as the way they start unless the server's environment says otherwise. It
is set only while an engine's processes start, and engines start one at a time, so that no
two instances ever race on `os.environ`."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from app.repository.instances import ModelInstance

SPAWN_LOCK = threading.Lock()
"""Held while an engine's processes start (in any thread of this process)."""
START_METHOD = "VLLM_WORKER_MULTIPROC_METHOD"
"""vLLM's choice between forking its engine core and workers and spawning them: forked from a
thread of a process that serves requests, a core starts with that process's state."""


def instance_environment(instance: ModelInstance) -> dict[str, str]:
    """The variables an instance's engine processes start with, on top of the server's."""
    environment = {START_METHOD: os.environ.get(START_METHOD, "spawn")}
    if instance.gpu is not None:
        environment["CUDA_VISIBLE_DEVICES"] = instance.gpu
    if instance.cpus:
        environment["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, instance.cpus))
    return environment


@contextmanager
def starting_on(instance: ModelInstance) -> Iterator[None]:
    """Start an engine's processes in here: one start at a time, with the instance's
    environment, restored afterwards."""
    with SPAWN_LOCK:
        environment = instance_environment(instance)
        saved = {name: os.environ.get(name) for name in environment}
        os.environ.update(environment)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
