"""vLLM's notes about OpenAI's Triton, a GPU kernel compiler (not Triton Inference Server),
left out of the log: with the CPU build, vLLM's import says in each process that Triton "is
installed, but doesn't include CPU backend" (and two consequences of that), and its CPU
platform that "triton-cpu is expected". Nothing is wrong: vLLM runs without that compiler on
CPUs, as these notes go on to say. Only these messages are left out; on GPU hosts vLLM never
writes them."""

from __future__ import annotations

import logging

COMPILER_CHECK = "vllm.triton_utils.importing"
"""The logger of vLLM's check for OpenAI's Triton, at import."""
CPU_PLATFORM = "vllm.platforms.cpu"
WITHOUT_CPU_BACKEND = "doesn't include CPU backend"
TRITON_CPU_EXPECTED = "triton-cpu is expected"


class CompilerNotes(logging.Filter):
    """Drops the CPU build's notes that OpenAI's Triton compiler is not used: the first, and
    once it was seen, the compiler check's other records (it found no driver, so no Triton)."""

    def __init__(self) -> None:
        super().__init__()
        self.without_cpu_backend = False

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if WITHOUT_CPU_BACKEND in text:
            self.without_cpu_backend = True
            return False
        if record.name == COMPILER_CHECK and self.without_cpu_backend:
            return False
        return not (record.name == CPU_PLATFORM and TRITON_CPU_EXPECTED in text)


NOTES = CompilerNotes()


def leave_out_compiler_notes() -> None:
    """Filter vLLM's loggers of those notes in this process (before vLLM is imported: the
    first note is written at import)."""
    for name in (COMPILER_CHECK, CPU_PLATFORM):
        logger = logging.getLogger(name)
        if NOTES not in logger.filters:
            logger.addFilter(NOTES)
