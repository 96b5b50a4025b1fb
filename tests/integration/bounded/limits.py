"""The bounds of the server these tests share (conftest.py's `bounded`)."""

from __future__ import annotations

DEADLINE_S = 15
"""GRAMMAR_COMPILE_TIMEOUT_SECONDS."""
WORKER_MEMORY_MB = 8192
"""The grammar workers' memory bound: high, so that the deadline comes first."""
MAX_GRAMMAR_BYTES = 8 * 2**20
"""High enough to admit the slow grammar (test_grammar_bounds_real_engine.SLOW_ENUM)."""
BODY_TIMEOUT_S = 3
"""HTTP_BODY_TIMEOUT_SECONDS."""
