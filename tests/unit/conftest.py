"""Unit-test apps keep the heap unfrozen (FREEZE_GC_HEAP=false): freezing collects the whole
test process's heap at each start-up and change, seconds per test. tests/unit/test_heap_freezer.py
turns it on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def heap_not_frozen() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FREEZE_GC_HEAP", "false")
        yield
