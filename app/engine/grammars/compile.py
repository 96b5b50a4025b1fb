"""A request's grammar compiled as the engine core compiles it, in a grammar worker process.

vLLM checks a structured-output request's grammar when the request arrives, but compiles it
later in the engine core, where a failure is only logged. Here the grammar goes through
vLLM's own checks (which choose the backend), is compiled with the backend the engine core
compiles it with, and its first token checked against the request's `allowed_token_ids`: the
`Verdict` says whether the engine can use it, and if not, why, in words for the client.
`setup` and `check_grammar` run in a worker (app/engine/worker_pool.py), never in the server.
"""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from app.errors import InvalidRequestError

CHECKED_BACKENDS = ("xgrammar", "guidance")
"""Backends whose compilers run here; others (outlines, lm-format-enforcer) are left to vLLM."""
COMPILER_PREFIX = re.compile(r"^\s*\[[\d:]+\]\s+\S+:\d+:\s*")
"""xgrammar's `[08:26:04] /project/cpp/json_schema_converter.cc:4944: ` before its reason."""
XGRAMMAR_CACHE = "VLLM_XGRAMMAR_CACHE_MB"
DEFAULT_XGRAMMAR_CACHE_MB = 512
"""vLLM's default size of xgrammar's cache of compiled grammars."""


@dataclass(frozen=True)
class CheckJob:
    """One request's sampling parameters, the field they came in (for messages), and the
    backend the engine compiles with (None until its first grammar chose one)."""

    params: Any
    field: str
    backend: str | None


@dataclass(frozen=True)
class Verdict:
    """passed (compiled with `backend`), refused (`message`, naming `param`), unchecked (left
    to vLLM's own checks), or unavailable (this vLLM cannot be asked; `message`: why)."""

    kind: Literal["passed", "refused", "unchecked", "unavailable"]
    backend: str | None = None
    message: str = ""
    param: str | None = None


@dataclass(frozen=True)
class WorkerSetup:
    """What a grammar worker is started with: the engine's configuration, and how much of its
    memory bound xgrammar's cache of compiled grammars may hold."""

    config: Any
    cache_mb: int


@dataclass
class CompileState:
    """A worker's: the engine's configuration, its tokenizer, the backends built so far."""

    config: Any
    tokenizer: Any
    backends: dict[str, Any] = field(default_factory=dict)

    def backend(self, name: str | None) -> Any:
        """vLLM's backend object for `name`, built once (its tokenizer tables take a while)."""
        if name not in CHECKED_BACKENDS:
            return None
        if name not in self.backends:
            self.backends[name] = build_backend(name, self.config, self.tokenizer)
        return self.backends[name]


def setup(worker: WorkerSetup) -> CompileState:
    """A worker's state: the engine core's tokenizer, and the backend a grammar most likely
    meets first (xgrammar, unless the engine is set to another) built ahead."""
    cache_mb = int(os.environ.get(XGRAMMAR_CACHE, DEFAULT_XGRAMMAR_CACHE_MB))
    os.environ[XGRAMMAR_CACHE] = str(min(cache_mb, worker.cache_mb))
    from vllm.tokenizers import cached_tokenizer_from_config

    config = worker.config
    model_config = config.model_config
    tokenizer = (
        None
        if getattr(model_config, "skip_tokenizer_init", False)
        else cached_tokenizer_from_config(model_config=model_config)
    )
    state = CompileState(config, tokenizer)
    configured = config.structured_outputs_config.backend
    if tokenizer is not None:
        state.backend("xgrammar" if configured == "auto" else configured)
    return state


def check_grammar(state: CompileState, job: CheckJob) -> Verdict:
    """The verdict on one request's grammar."""
    name = f"{job.field}.structured_outputs" if job.field else "structured_outputs"
    try:
        return compiled(state, job, name)
    except InvalidRequestError as refused:
        return Verdict("refused", message=refused.detail, param=refused.param)


def compiled(state: CompileState, job: CheckJob, name: str) -> Verdict:
    try:
        prepared = prepare(state, job, name)
    except InvalidRequestError:
        raise
    except Exception as exc:  # noqa: BLE001 - a vLLM without these interfaces: its checks alone
        raise_if_out_of_memory(exc)
        return Verdict("unavailable", message=traceback.format_exc())
    if prepared is None:
        return Verdict("unchecked")
    backend_name, backend, spec = prepared
    try:
        grammar = backend.compile_grammar(*spec)
    except Exception as exc:  # the compiler's refusal, whatever its type
        raise_if_out_of_memory(exc)
        raise refusal(name, f"the engine cannot use this grammar: {compiler_reason(exc)}") from exc
    check_first_token(backend, grammar, job, name)
    return Verdict("passed", backend=backend_name)


def prepare(state: CompileState, job: CheckJob, name: str) -> tuple[str, Any, Any] | None:
    """The backend the engine core compiles this grammar with, and the grammar as it compiles
    it; None when this check has nothing to add to vLLM's."""
    probe = validated(state, job.params, name)
    if probe is None:
        return None
    backend_name = job.backend or probe.structured_outputs._backend
    backend = state.backend(backend_name)
    if backend is None:
        return None
    return backend_name, backend, structured_output_key(probe.structured_outputs)


def check_first_token(backend: Any, grammar: Any, job: CheckJob, name: str) -> None:
    """Refuse a grammar the matcher could not follow, one no text satisfies, and
    `allowed_token_ids` that leave no token it allows first."""
    first = first_tokens(backend, grammar)
    error = matcher_error(grammar)
    if error:
        raise refusal(name, f"the engine cannot use this grammar: {matcher_reason(error)}")
    if not first.any():
        raise refusal(name, "the grammar matches no text: no token can start it")
    allowed_ids = job.params.allowed_token_ids
    allowed = [i for i in allowed_ids or () if 0 <= i < first.size]
    if allowed_ids and not first[allowed].any():
        field_name = f"{job.field}.allowed_token_ids" if job.field else "allowed_token_ids"
        raise refusal(field_name, "none of these tokens can start the text the grammar allows")


def validated(state: CompileState, params: Any, name: str) -> Any:
    """A copy of `params` through vLLM's own checks (which choose the backend), or None where
    this vLLM cannot be asked (its checks then run when the engine takes it). A grammar those
    checks refuse (every backend they try refused it) is refused here, so that a stream never
    starts before its refusal."""
    probe = params.clone()
    config = state.config
    try:
        probe.verify(
            config.model_config,
            config.speculative_config,
            config.structured_outputs_config,
            state.tokenizer,
        )
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - vLLM refuses it again when the engine takes it
        refuse_if_grammar_refused(state, params, name)
        return None
    return probe if getattr(probe.structured_outputs, "_backend", None) else None


def refuse_if_grammar_refused(state: CompileState, params: Any, name: str) -> None:
    """Refuse the request when vLLM's structured-output check alone refuses it (the failure
    of `verify` was the grammar's, not another parameter's)."""
    probe = params.clone()
    validate = getattr(probe, "_validate_structured_outputs", None)
    if validate is None:
        return
    config = state.config
    try:
        validate(config.model_config, config.structured_outputs_config, state.tokenizer)
    except Exception as exc:  # the backends' refusal, whatever its type
        raise_if_out_of_memory(exc)
        raise refusal(name, f"the engine cannot use this grammar: {compiler_reason(exc)}") from exc


def raise_if_out_of_memory(exc: Exception) -> None:
    """A compiler that ran out of memory says so as a MemoryError, or (xgrammar) as a
    RuntimeError with C++'s `std::bad_alloc`: both are the worker's memory bound, not the
    grammar's fault alone."""
    if isinstance(exc, MemoryError):
        raise exc
    if "bad_alloc" in str(exc):
        raise MemoryError(str(exc)) from exc


def refusal(field: str, reason: str) -> InvalidRequestError:
    return InvalidRequestError(f"{field}: {reason}", param=field)


def compiler_reason(exc: BaseException) -> str:
    """A compiler's message without its source location, on one line."""
    text = COMPILER_PREFIX.sub("", str(exc)).strip()
    return " ".join(text.split()) or type(exc).__name__


def matcher_reason(error: str) -> str:
    """llguidance's error without the parser state it appends."""
    return " ".join(error.split("<state>")[0].split())


def build_backend(name: str, config: Any, tokenizer: Any) -> Any:
    vocab_size = config.model_config.get_vocab_size()
    if name == "xgrammar":
        from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

        return XgrammarBackend(config, tokenizer=tokenizer, vocab_size=vocab_size)
    from vllm.v1.structured_output.backend_guidance import GuidanceBackend

    return GuidanceBackend(config, tokenizer=tokenizer, vocab_size=vocab_size)


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
