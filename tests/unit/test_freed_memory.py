"""What a stopped engine leaves behind is let go: vLLM's signature cache keeps no function of
an engine that is gone (app/engine/freed_memory.py)."""

from __future__ import annotations

import weakref
from collections.abc import Callable

from vllm.utils.func_utils import supports_kw

from app.engine.freed_memory import return_freed_memory


class Tokenizers:
    """Stands for what an engine's tokenizer pool holds."""


def pool_function(held: Tokenizers) -> Callable[..., object]:
    """A function made per engine, as vLLM's tokenizer pool makes `apply_chat_template`."""

    def apply_chat_template(messages: object, **kwargs: object) -> object:
        return held, messages, kwargs

    return apply_chat_template


def test_a_function_vllm_inspected_does_not_outlive_its_engine() -> None:
    held = Tokenizers()
    alive = weakref.ref(held)
    function = pool_function(held)
    assert supports_kw(function, "tools", allow_var_kwargs=False) is False
    del function, held
    assert alive() is not None, "vLLM's cache holds the function (and what it holds)"
    return_freed_memory()
    assert alive() is None
