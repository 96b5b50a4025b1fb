"""tritonserver's services and log on the engine double, in a server process of its own (the
command line's whole path): --allow-http=false and --allow-grpc=false leave that service's
socket closed and its start-up line out; --log-file takes the server's lines off the console."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as triton_grpc

from tests.support.asgi import free_ports
from tests.support.double_tritonserver import double_tritonserver
from tests.support.servers import accepts_connections

TRITON_LINE = re.compile(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ \S+\.py:\d+\] ", re.MULTILINE)


def flags(repository: Path, http: int, grpc: int, metrics: int, *more: str) -> list[str]:
    return [
        f"--model-repository={repository}",
        "--http-address=127.0.0.1",
        f"--http-port={http}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        *more,
    ]


def test_allow_http_false_opens_no_http_socket(repository: Path, tmp_path: Path) -> None:
    http, grpc, metrics = free_ports(3)
    with double_tritonserver(
        *flags(repository, http, grpc, metrics, "--allow-http=false"),
        console=tmp_path / "console.log",
        started="Started GRPCInferenceService at",
    ) as server:
        assert server.listening_ports() == {grpc, metrics}
        with triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc}") as client:
            assert client.is_server_ready()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{http}/v2/health/ready")
        code = server.stop()
    console = server.console.read_text()
    assert code == 0, console
    assert f"Started GRPCInferenceService at 127.0.0.1:{grpc}" in console
    assert f"Started Metrics Service at 127.0.0.1:{metrics}" in console
    assert "Started HTTPService" not in console


def test_allow_grpc_false_starts_no_grpc_server(repository: Path, tmp_path: Path) -> None:
    http, grpc, metrics = free_ports(3)
    with double_tritonserver(
        *flags(repository, http, grpc, metrics, "--allow-grpc=false"),
        console=tmp_path / "console.log",
        started="Started HTTPService at",
    ) as server:
        assert server.listening_ports() == {http, metrics}
        assert httpx.get(f"http://127.0.0.1:{http}/v2/health/ready").status_code == 200
        assert not accepts_connections(f"127.0.0.1:{grpc}")
        code = server.stop()
    console = server.console.read_text()
    assert code == 0, console
    assert f"Started HTTPService at 127.0.0.1:{http}" in console
    assert "Started GRPCInferenceService" not in console


def test_log_file_takes_the_servers_lines_off_the_console(repository: Path, tmp_path: Path) -> None:
    http, grpc, metrics = free_ports(3)
    log_file = tmp_path / "server.log"
    with double_tritonserver(
        *flags(repository, http, grpc, metrics, f"--log-file={log_file}"),
        console=tmp_path / "console.log",
        log=log_file,
        started="Started GRPCInferenceService at",
    ) as server:
        url = f"http://127.0.0.1:{http}"
        assert httpx.get(f"{url}/v2/logging").json()["log_file"] == str(log_file)
        httpx.get(f"{url}/v2/health/ready", headers={"X-Request-ID": "to-the-file-1"})
        code = server.stop()
    text, console = log_file.read_text(), server.console.read_text()
    assert code == 0, console
    for line in (
        f"Started Metrics Service at 127.0.0.1:{metrics}",
        "| fake  | 1       | READY  |",
        f"Started HTTPService at 127.0.0.1:{http}",
        f"Started GRPCInferenceService at 127.0.0.1:{grpc}",
        "request_id=to-the-file-1",
        "SIGTERM: draining before shutdown",
    ):
        assert line in text, text
        assert line not in console, console
    assert TRITON_LINE.search(text), "Triton's line format"
    assert not TRITON_LINE.search(console), console
