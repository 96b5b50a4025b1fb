"""Grammars checked before the engine takes a request, and the engine's failures classified.

vLLM checks a structured-output request's grammar when the request arrives, but compiles it
later in the engine core, where a failure is only logged: the request then ends with the
finish reason "error" (an internal error to vLLM's OpenAI server) or, with llguidance, stops
at once as if it had finished. Here the grammar is compiled in this process with the backend
the engine core compiles it with, and its first token checked against the request's
`allowed_token_ids`, so that a grammar the engine cannot use is refused (400, with the
compiler's reason) before the engine sees it. `failure_of` classifies a request the engine
ended with an error: the client's fault when its grammar was in play, else the server's.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import weakref
from typing import Any

import numpy as np

from app.errors import InvalidRequestError, ServerError

logger = logging.getLogger(__name__)

ENGINE_ERROR = "error"
"""vLLM's finish reason for a request the engine failed."""
CHECKED_BACKENDS = ("xgrammar", "guidance")
"""Backends whose compilers run here; others (outlines, lm-format-enforcer) are left to vLLM."""
COMPILER_PREFIX = re.compile(r"^\s*\[[\d:]+\]\s+\S+:\d+:\s*")
"""xgrammar's `[08:26:04] /project/cpp/json_schema_converter.cc:4944: ` before its reason."""
GRAMMAR_FAILED = (
    "the engine could not use this grammar with this request (its compiler refused it, or "
    "the request's token constraints leave no token the grammar allows)"
)


def failure_of(params: Any, field: str) -> ServerError:
    """The error of a request the engine ended with finish reason "error": the request's
    own when it had a grammar, else the server's."""
    if getattr(params, "structured_outputs", None) is not None:
        name = f"{field}.structured_outputs" if field else "structured_outputs"
        return InvalidRequestError(f"{name}: {GRAMMAR_FAILED}", param=name)
    return ServerError("Error generating stream: the engine could not run the request")


def compiler_reason(exc: BaseException) -> str:
    """A compiler's message without its source location, on one line."""
    text = COMPILER_PREFIX.sub("", str(exc)).strip()
    return " ".join(text.split()) or type(exc).__name__


def matcher_reason(error: str) -> str:
    """llguidance's error without the parser state it appends."""
    return " ".join(error.split("<state>")[0].split())


class GrammarCheck:
    """One engine's grammars, compiled here as its engine core compiles them: with the
    backend of the first structured-output request it took (vLLM's core keeps that one)."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self._backend_name: str | None = None
        self._backends: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._unavailable = False

    async def check(self, params: Any, field: str) -> None:
        """Refuse (`InvalidRequestError` naming `field`.structured_outputs) a grammar the
        engine cannot use; compiled in a worker thread, off the event loop."""
        if getattr(params, "structured_outputs", None) is not None:
            await asyncio.to_thread(self._check, params, field)

    def _check(self, params: Any, field: str) -> None:
        name = f"{field}.structured_outputs" if field else "structured_outputs"
        if self._unavailable:
            return
        try:
            prepared = self._prepare(params, name)
        except InvalidRequestError:
            raise
        except Exception:  # a vLLM without these interfaces: its own checks alone
            self._unavailable = True
            logger.warning("grammars are not checked before the engine takes them", exc_info=True)
            return
        if prepared is None:
            return
        backend_name, backend, (request_type, spec) = prepared
        try:
            grammar = backend.compile_grammar(request_type, spec)
        except Exception as exc:  # the compiler's refusal, whatever its type
            raise refusal(
                name, f"the engine cannot use this grammar: {compiler_reason(exc)}"
            ) from exc
        first = first_tokens(backend, grammar)
        error = matcher_error(grammar)
        if error:
            raise refusal(name, f"the engine cannot use this grammar: {matcher_reason(error)}")
        if not first.any():
            raise refusal(name, "the grammar matches no text: no token can start it")
        allowed = [i for i in params.allowed_token_ids or () if 0 <= i < first.size]
        if params.allowed_token_ids and not first[allowed].any():
            field_name = f"{field}.allowed_token_ids" if field else "allowed_token_ids"
            raise refusal(field_name, "none of these tokens can start the text the grammar allows")
        with self._lock:
            self._backend_name = self._backend_name or backend_name

    def _prepare(self, params: Any, name: str) -> tuple[str, Any, tuple[Any, str]] | None:
        """The backend the engine core compiles this grammar with, and the grammar as it
        compiles it; None when this check has nothing to add to vLLM's."""
        probe = self._validated(params, name)
        if probe is None:
            return None
        with self._lock:
            backend_name = self._backend_name or probe.structured_outputs._backend
            backend = self._backend(backend_name)
        if backend is None:
            return None
        return backend_name, backend, structured_output_key(probe.structured_outputs)

    def _validated(self, params: Any, name: str) -> Any:
        """A copy of `params` through vLLM's own checks (which choose the backend), or None
        where this vLLM cannot be asked (its checks then run when the engine takes it). A
        grammar those checks refuse (every backend they try refused it) is refused here, so
        that a stream never starts before its refusal."""
        probe = params.clone()
        llm = self._llm
        config = llm.vllm_config
        try:
            probe.verify(
                llm.model_config,
                config.speculative_config,
                config.structured_outputs_config,
                tokenizer_of(llm),
            )
        except Exception:  # noqa: BLE001 - vLLM refuses it again when the engine takes it
            self._refuse_if_grammar_refused(params, name)
            return None
        return probe if getattr(probe.structured_outputs, "_backend", None) else None

    def _refuse_if_grammar_refused(self, params: Any, name: str) -> None:
        """Refuse the request when vLLM's structured-output check alone refuses it (the
        failure of `verify` was the grammar's, not another parameter's)."""
        probe = params.clone()
        llm = self._llm
        validate = getattr(probe, "_validate_structured_outputs", None)
        if validate is None:
            return
        try:
            validate(llm.model_config, llm.vllm_config.structured_outputs_config, tokenizer_of(llm))
        except Exception as exc:  # the backends' refusal, whatever its type
            raise refusal(
                name, f"the engine cannot use this grammar: {compiler_reason(exc)}"
            ) from exc

    def _backend(self, name: str | None) -> Any:
        """vLLM's backend object for `name`, built once (its tokenizer tables take a while)."""
        if name not in CHECKED_BACKENDS:
            return None
        if name not in self._backends:
            self._backends[name] = build_backend(name, self._llm)
        return self._backends[name]


def refusal(field: str, reason: str) -> InvalidRequestError:
    return InvalidRequestError(f"{field}: {reason}", param=field)


def build_backend(name: str, llm: Any) -> Any:
    config = llm.vllm_config
    vocab_size = config.model_config.get_vocab_size()
    if name == "xgrammar":
        from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

        return XgrammarBackend(config, tokenizer=tokenizer_of(llm), vocab_size=vocab_size)
    from vllm.v1.structured_output.backend_guidance import GuidanceBackend

    return GuidanceBackend(config, tokenizer=tokenizer_of(llm), vocab_size=vocab_size)


def tokenizer_of(llm: Any) -> Any:
    tokenizer = getattr(llm, "tokenizer", None)
    return tokenizer if tokenizer is not None else llm.input_processor.tokenizer


def structured_output_key(params: Any) -> tuple[Any, str]:
    """(request type, grammar text) as the engine core compiles them."""
    from vllm.v1.structured_output.request import get_structured_output_key

    return get_structured_output_key(params)


def first_tokens(backend: Any, grammar: Any) -> np.ndarray:
    """Which tokens the grammar allows first (a bool per vocabulary entry)."""
    bitmask = backend.allocate_token_bitmask(1)
    grammar.fill_bitmask(bitmask, 0)
    words = bitmask[0].cpu().numpy().astype("<i4")
    return np.unpackbits(words.view(np.uint8), bitorder="little")[: backend.vocab_size].astype(bool)


def matcher_error(grammar: Any) -> str:
    """llguidance's error for a grammar it could not follow (its other grammars have none)."""
    matcher = getattr(grammar, "ll_matcher", None)
    return (matcher.get_error() or "") if matcher is not None else ""


_CHECKS: weakref.WeakKeyDictionary[Any, GrammarCheck] = weakref.WeakKeyDictionary()


def grammar_check(llm: Any) -> GrammarCheck:
    """The grammar check of one engine (one per `AsyncLLM`, made on first use)."""
    check = _CHECKS.get(llm)
    if check is None:
        check = _CHECKS[llm] = GrammarCheck(llm)
    return check
