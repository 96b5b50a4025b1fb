"""What a stopped engine leaves behind, given back: its objects collected, the caches of vLLM
that would keep them alive emptied, and the freed heap returned to the system."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable

__all__ = ["return_freed_memory"]

MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)
"""glibc's: returns the free heap to the system (absent from other C libraries)."""


def _signature_cache() -> Callable[[], None] | None:
    """The `cache_clear` of vLLM's `supports_kw` cache, where this release has one.

    The cache is keyed by the function it inspects. vLLM's chat rendering asks it about the
    `apply_chat_template` of the engine's tokenizer pool: a function made for each engine,
    which holds the pool and its tokenizer copies (some 40 MiB for the default model). Kept
    by the cache, they outlived their engine: every reload followed by a chat request kept
    one more set."""
    try:
        from vllm.utils.func_utils import _supports_kw
    except ImportError:  # pragma: no cover - a release without it
        return None
    clear: Callable[[], None] | None = getattr(_supports_kw, "cache_clear", None)
    return clear


def return_freed_memory() -> None:
    """Collect the stopped engine's objects and hand the freed heap back to the system: the
    allocator keeps it otherwise, and the server's RSS grows with every reload. (Frozen
    objects are never collected: the registry thaws the heap around each load, unload and
    engine restart, app/repository/heap_freezer.py.) vLLM's signature cache is emptied first
    (it fills again as the next requests need it): it would keep the stopped engine's
    tokenizers alive."""
    clear_signature_cache = _signature_cache()
    if clear_signature_cache is not None:
        clear_signature_cache()
    gc.collect()
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)
