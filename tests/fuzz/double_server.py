"""The server with the engine double, in a process of its own (the fuzzer's own work, and its
garbage collections, must not pause the server whose readiness probe is timed).

    python -m tests.fuzz.double_server REPOSITORY SETTINGS_JSON

prints `HTTP_URL GRPC_URL` once serving, and stops when its standard input closes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.paths import PROJECT_ROOT


@contextmanager
def double_server(repository: Path, **settings: Any) -> Iterator[tuple[str, str]]:
    """(HTTP base URL, gRPC address) of a server with the engine double in a subprocess."""
    command = [sys.executable, "-m", "tests.fuzz.double_server", str(repository)]
    command.append(json.dumps(settings))
    with subprocess.Popen(
        command, cwd=PROJECT_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:  # leaving it closes both pipes
        assert process.stdin is not None and process.stdout is not None
        try:
            line = process.stdout.readline()
            assert line, "the double server did not start"
            http_url, grpc_url = line.split()
            yield http_url, grpc_url
        finally:
            process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def main() -> None:
    from tests.doubles import FakeEngine
    from tests.support.triton_grpc import serve_grpc_app

    repository, settings = Path(sys.argv[1]), json.loads(sys.argv[2])
    engine = FakeEngine()
    with serve_grpc_app(repository, lambda spec: engine, **settings) as app:
        print(app.http_url, app.grpc_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
