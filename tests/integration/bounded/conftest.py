"""One real server for the tests of the server's bounds (a grammar's compile deadline, a
request body's deadline, the size of a request's head): one engine start for them all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.bounded.limits import (
    BODY_TIMEOUT_S,
    DEADLINE_S,
    MAX_GRAMMAR_BYTES,
    WORKER_MEMORY_MB,
)
from tests.support.servers import RunningServer, start_server, stopping_cleanly


@pytest.fixture(scope="package")
def bounded() -> Iterator[RunningServer]:
    """A server with a short compile deadline and a grammar limit that admits the slow grammar,
    whose request bodies must arrive within BODY_TIMEOUT_S; its log holds no traceback."""
    env = {
        "GRAMMAR_COMPILE_TIMEOUT_SECONDS": str(DEADLINE_S),
        "GRAMMAR_WORKER_MEMORY_MB": str(WORKER_MEMORY_MB),
        "MAX_GRAMMAR_BYTES": str(MAX_GRAMMAR_BYTES),
        "HTTP_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT_S),
    }
    server = start_server(name="bounded", env=env)
    with stopping_cleanly(server):
        yield server
    assert "Traceback" not in server.log_path.read_text(errors="replace"), server.log_tail(80)
