"""Structured-output grammars checked before the engine takes them (`grammar_check`), in
worker processes bounded in memory and time, and the engine's failures classified."""

from app.engine.grammars.check import (
    ENGINE_ERROR,
    GrammarCheck,
    close_grammar_check,
    configure_grammar_workers,
    failure_of,
    grammar_check,
)

__all__ = [
    "ENGINE_ERROR",
    "GrammarCheck",
    "close_grammar_check",
    "configure_grammar_workers",
    "failure_of",
    "grammar_check",
]
