"""Grammars checked before the engine takes a request, and the engine's failures classified.

vLLM compiles a structured-output request's grammar in the engine core, where a failure is
only logged: the request then ends with the finish reason "error" or, with llguidance, stops
at once as if it had finished. `GrammarCheck` has each grammar compiled first, with the
backend the engine core compiles it with, so that a grammar the engine cannot use is refused
(400, with the compiler's reason) before the engine sees it. The compile runs in a few worker
processes of the engine's (app/engine/worker_pool.py), bounded in memory and time: a grammar
too large for those bounds is refused too, and one whose client leaves stops compiling.
`failure_of` classifies a request the engine ended with an error: the client's fault when its
grammar was in play, else the server's.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from app.engine.grammars.compile import (
    CheckJob,
    Verdict,
    WorkerSetup,
    check_grammar,
    refusal,
    setup,
)
from app.engine.worker_pool import (
    JobCrashed,
    JobOutOfMemory,
    JobRaised,
    JobTimedOut,
    WorkerFailed,
    WorkerOptions,
    WorkerPool,
    WorkerSpec,
)
from app.errors import InvalidRequestError, ServerError

logger = logging.getLogger(__name__)

ENGINE_ERROR = "error"
"""vLLM's finish reason for a request the engine failed."""
GRAMMAR_FAILED = (
    "the engine could not use this grammar with this request (its compiler refused it, or "
    "the request's token constraints leave no token the grammar allows)"
)
CACHE_SHARE = 8
"""xgrammar's cache of compiled grammars may hold an eighth of a worker's memory bound."""
_options = WorkerOptions()


def configure_grammar_workers(options: WorkerOptions) -> None:
    """The size and bounds of the grammar workers of engines started from now on."""
    global _options
    _options = options


def failure_of(params: Any, field: str) -> ServerError:
    """The error of a request the engine ended with finish reason "error": the request's
    own when it had a grammar, else the server's."""
    if getattr(params, "structured_outputs", None) is not None:
        name = f"{field}.structured_outputs" if field else "structured_outputs"
        return InvalidRequestError(f"{name}: {GRAMMAR_FAILED}", param=name)
    return ServerError("Error generating stream: the engine could not run the request")


class GrammarCheck:
    """One engine's grammars, compiled in its grammar workers as its engine core compiles
    them: with the backend of the first structured-output request it took (vLLM's core keeps
    that one)."""

    def __init__(self, llm: Any, options: WorkerOptions | None = None) -> None:
        self._llm = llm
        self._options = options or _options
        self._backend_name: str | None = None
        self._pool: WorkerPool | None = None
        self._unavailable = False

    @property
    def pool(self) -> WorkerPool | None:
        """The workers' pool, once a grammar has needed it."""
        return self._pool

    async def check(self, params: Any, field: str) -> None:
        """Refuse (`InvalidRequestError` naming `field`.structured_outputs) a grammar the
        engine cannot use, or that does not compile within the workers' bounds."""
        if getattr(params, "structured_outputs", None) is None or self._unavailable:
            return
        name = f"{field}.structured_outputs" if field else "structured_outputs"
        options = self._options
        try:
            verdict = await self._workers().run(CheckJob(params, field, self._backend_name))
        except JobTimedOut as exc:
            reason = f"the grammar is too large to compile within {options.job_seconds:g} s"
            raise stopped(name, reason, exc) from exc
        except (JobOutOfMemory, JobCrashed) as exc:
            reason = f"the grammar is too large to compile within {options.memory_mb} MB"
            raise stopped(name, reason, exc) from exc
        except RecursionError as exc:  # the job could not be pickled for its worker
            raise stopped(name, "the grammar is nested too deeply to compile", exc) from exc
        except WorkerFailed as exc:
            self._give_up(f"the grammar worker could not start: {exc}")
            return
        except JobRaised as exc:
            logger.warning("a grammar was left to the engine: its check failed: %s", exc)
            return
        self._apply(verdict)

    def _apply(self, verdict: Verdict) -> None:
        if verdict.kind == "refused":
            raise InvalidRequestError(verdict.message, param=verdict.param)
        if verdict.kind == "unavailable":
            self._give_up(verdict.message)
        elif verdict.kind == "passed":
            self._backend_name = self._backend_name or verdict.backend

    def _give_up(self, reason: str) -> None:
        """Leave every grammar of this engine to vLLM's own checks from now on."""
        self._unavailable = True
        logger.warning("grammars are not checked before the engine takes them: %s", reason)

    def _workers(self) -> WorkerPool:
        if self._pool is None:
            worker = WorkerSetup(self._llm.vllm_config, self._options.memory_mb // CACHE_SHARE)
            spec = WorkerSpec("grammar-worker", setup, check_grammar, worker)
            self._pool = WorkerPool(spec, self._options)
            weakref.finalize(self, self._pool.close)
        return self._pool

    def close(self) -> None:
        """Stop the workers (the engine stopped)."""
        if self._pool is not None:
            self._pool.close()


def stopped(name: str, reason: str, exc: Exception) -> InvalidRequestError:
    """The refusal of a grammar whose compile was stopped; its worker's end logged."""
    logger.info("a grammar worker was replaced: %s (%s)", exc, reason)
    return refusal(name, reason)


_CHECKS: weakref.WeakKeyDictionary[Any, GrammarCheck] = weakref.WeakKeyDictionary()


def grammar_check(llm: Any) -> GrammarCheck:
    """The grammar check of one engine (one per `AsyncLLM`, made on first use)."""
    check = _CHECKS.get(llm)
    if check is None:
        check = _CHECKS[llm] = GrammarCheck(llm)
    return check


def close_grammar_check(llm: Any) -> None:
    """Stop the grammar workers of an engine that stopped."""
    check = _CHECKS.pop(llm, None)
    if check is not None:
        check.close()
