"""The real server started as Triton's command line, with real engines.

One server for most of this module, `tritonserver` on two repositories and non-default ports:
    first/alpha   smollm2 with LoRA enabled (an adapter made here with peft, loaded at run time)
    second/beta   smollm2
    first/twin, second/twin   the same model in both repositories: UNAVAILABLE, as in Triton
and, at the end, a launch line of the vLLM backend's README as it is written, whose server is
then killed with SIGKILL: no engine process may outlive it.
"""

from __future__ import annotations

import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from app.engine.version import vllm_version
from tests.integration.test_repository_real_engine import (
    MODEL_DIR,
    SAMPLE_CONFIG,
    make_adapter,
    write_json,
)
from tests.support.asgi import free_ports
from tests.support.servers import RunningServer, kill_tree
from tests.support.tritonserver import run_tritonserver, start_tritonserver
from tests.support.waiting import wait_until

ENGINE_ARGS = {"model": str(MODEL_DIR), "enforce_eager": True, "max_model_len": 1024}
GREEDY = {"temperature": 0, "max_tokens": 16}
GUARDIAN = "guardian.py"
README_LAUNCH_LINE = ["--model-repository", "./samples/model_repository"]
"""The vLLM backend's README: `tritonserver --model-repository ./samples/model_repository`."""


@pytest.fixture(scope="module")
def ports() -> dict[str, int]:
    http, grpc, metrics = free_ports(3)
    return {"http": http, "grpc": grpc, "metrics": metrics}


@pytest.fixture(scope="module")
def repositories(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    write_json(
        first / "alpha" / "1" / "model.json",
        {**ENGINE_ARGS, "enable_lora": True, "max_lora_rank": 8},
    )
    write_json(first / "alpha" / "1" / "multi_lora.json", {})
    make_adapter(first / "alpha" / "adapters" / "sql")
    write_json(second / "beta" / "1" / "model.json", ENGINE_ARGS)
    for root in (first, second):
        write_json(root / "twin" / "1" / "model.json", ENGINE_ARGS)
    return first, second


@pytest.fixture(scope="module")
def triton_server(
    repositories: tuple[Path, Path], ports: dict[str, int]
) -> Iterator[RunningServer]:
    first, second = repositories
    server = start_tritonserver(
        f"--model-repository={first}",
        "--model-store",
        str(second),
        f"--http-port={ports['http']}",
        "--grpc-port",
        str(ports["grpc"]),
        f"--metrics-port={ports['metrics']}",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--exit-on-error=false",
        "--exit-timeout-secs=10",
        "--log-verbose=0",
        "--cache-config",
        "local,size=1048576",
        http_port=ports["http"],
        grpc_port=ports["grpc"],
        name="tritonserver",
        env={"CPU_KVCACHE_SPACE_GIB": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"},
    )
    yield server
    code, alive = server.stop(signal.SIGTERM)
    for process in alive:
        process.kill()
    assert code == 0 and not alive, server.log_tail()


@pytest.fixture
def http(triton_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=triton_server.base_url, timeout=120) as client:
        yield client


def model_table(log: str) -> list[list[str]]:
    """The rows of the last `| Model | Version | Status |` table in the log."""
    start = log.rindex("| Model ")
    rows = []
    for line in log[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_start_up_prints_tritons_lines_and_model_table(
    triton_server: RunningServer, ports: dict[str, int]
) -> None:
    log = triton_server.log_path.read_text()
    assert f"Started GRPCInferenceService at 127.0.0.1:{ports['grpc']}" in log
    assert f"Started HTTPService at 127.0.0.1:{ports['http']}" in log
    assert f"Started Metrics Service at 127.0.0.1:{ports['metrics']}" in log
    assert model_table(log) == [
        ["alpha", "1", "READY"],
        ["beta", "1", "READY"],
        ["twin", "-", "UNAVAILABLE: model appears in two or more repositories"],
    ]
    assert "failed to poll model 'twin': not unique across all model repositories" in log
    assert re.search(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ \S+\.py:\d+\] ", log, re.MULTILINE), (
        "Triton's line format"
    )
    assert httpx.get(f"http://127.0.0.1:{ports['metrics']}/metrics").status_code == 200


def test_start_up_takes_tritons_cache_flag_and_logs_its_ports_and_options_table(
    triton_server: RunningServer, ports: dict[str, int]
) -> None:
    log = triton_server.log_path.read_text()
    assert (
        "--cache-config=local,size=1048576: accepted for compatibility with tritonserver; it has "
        "no effect here: Triton's response cache does not apply to decoupled models" in log
    )
    assert (
        f"ports: HTTP 127.0.0.1:{ports['http']}, gRPC 127.0.0.1:{ports['grpc']}, "
        f"metrics 127.0.0.1:{ports['metrics']}" in log
    )
    options = dict(options_table_rows(log))
    assert options["model_control_mode"] == "MODE_NONE"
    assert options["model_repository_path[1]"].endswith("second0")
    assert (options["exit_timeout"], options["cache_enabled"], options["rate_limit"]) == (
        "10",
        "0",
        "OFF",
    )
    assert list(options)[:3] == ["server_id", "server_version", "server_extensions"]


def options_table_rows(log: str) -> list[tuple[str, str]]:
    """The rows of the `| Option | Value |` table in the log."""
    start = log.index("| Option ")
    rows = []
    for line in log[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        name, value = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((name, value))
    return rows


def test_both_repositories_serve_and_the_twin_is_unavailable(
    triton_server: RunningServer, http: httpx.Client
) -> None:
    client = triton_http.InferenceServerClient(triton_server.base_url.removeprefix("http://"))
    index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    assert index["twin"] == {
        "name": "twin",
        "state": "UNAVAILABLE",
        "reason": "model appears in two or more repositories",
    }
    assert (index["alpha"]["state"], index["beta"]["state"]) == ("READY", "READY")
    assert client.is_server_ready(), (
        "as in Triton, a model never tried does not count against readiness"
    )
    for model in ("alpha", "beta"):
        answer = http.post(
            f"/v2/models/{model}/generate", json={"text_input": "Hi", "parameters": GREEDY}
        )
        assert answer.status_code == 200 and answer.json()["model_name"] == model
    assert http.post("/v2/models/twin/generate", json={"text_input": "Hi"}).status_code == 404


def access_line(log_path: Path, request_id: str) -> str | None:
    return next(
        (line for line in log_path.read_text().splitlines() if f"request_id={request_id}" in line),
        None,
    )


def test_a_log_setting_changes_the_next_requests_log(
    triton_server: RunningServer, http: httpx.Client
) -> None:
    assert http.get("/v2/logging").json() == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }
    quiet, loud = f"quiet-{uuid.uuid4().hex}", f"loud-{uuid.uuid4().hex}"
    assert http.post("/v2/logging", json={"log_info": False}).json()["log_info"] is False
    http.get("/v2/models/alpha", headers={"X-Request-ID": quiet})
    assert (
        http.post("/v2/logging", json={"log_info": True, "log_format": "ISO8601"}).status_code
        == 200
    )
    http.get("/v2/models/alpha", headers={"X-Request-ID": loud})
    try:
        # the access line is written as the response ends: wait for the later request's
        wait_until(lambda: access_line(triton_server.log_path, loud) is not None, timeout=30)
        assert access_line(triton_server.log_path, quiet) is None, "info records were off"
        line = access_line(triton_server.log_path, loud)
        assert line is not None and re.match(
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ access_log\.py:\d+\] ", line
        ), line
    finally:
        http.post("/v2/logging", json={"log_format": "default"})


def test_log_settings_round_trip_over_grpc(
    triton_server: RunningServer, http: httpx.Client
) -> None:
    with triton_grpc.InferenceServerClient(triton_server.grpc_url) as client:
        changed = client.update_log_settings({"log_verbose_level": 1, "log_warning": False})
        assert changed.settings["log_verbose_level"].uint32_param == 1
        assert not changed.settings["log_warning"].bool_param
        assert http.get("/v2/logging").json()["log_verbose_level"] == 1
        back = client.update_log_settings({"log_verbose_level": 0, "log_warning": True})
        assert (
            back.settings["log_verbose_level"].uint32_param == 0
            and back.settings["log_warning"].bool_param
        )


def test_version_and_tokenize_round_trip(http: httpx.Client) -> None:
    assert http.get("/version").json() == {"version": vllm_version()}
    text = "Triton serves vLLM models."
    tokens = http.post(
        "/tokenize", json={"model": "alpha", "prompt": text, "return_token_strs": True}
    ).json()
    assert tokens["count"] == len(tokens["tokens"]) == len(tokens["token_strs"]) > 3
    assert tokens["max_model_len"] == 1024
    assert http.post("/detokenize", json={"model": "beta", "tokens": tokens["tokens"]}).json() == {
        "prompt": text
    }
    chat = http.post(
        "/tokenize", json={"model": "alpha", "messages": [{"role": "user", "content": text}]}
    ).json()
    assert chat["count"] > tokens["count"], "the chat template adds its tokens"
    missing = http.post("/tokenize", json={"model": "twin", "prompt": text})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"


def complete(http: httpx.Client, model: str) -> httpx.Response:
    return http.post("/v1/completions", json={"model": model, "prompt": "SELECT", **GREEDY})


def test_a_lora_adapter_loaded_at_run_time_answers_requests(http: httpx.Client) -> None:
    outside = http.post(
        "/v1/load_lora_adapter", json={"model": "alpha", "lora_name": "etc", "lora_path": "/etc"}
    )
    assert outside.status_code == 400 and "/etc" not in outside.text
    body = {"model": "alpha", "lora_name": "sql", "lora_path": "alpha/adapters/sql"}
    loaded = http.post("/v1/load_lora_adapter", json=body)
    assert (loaded.status_code, loaded.text) == (
        200,
        "Success: LoRA adapter 'sql' added successfully.",
    )
    assert "sql" in [card["id"] for card in http.get("/v1/models").json()["data"]]
    plain, adapted = complete(http, "alpha"), complete(http, "sql")
    assert plain.status_code == adapted.status_code == 200, adapted.text
    assert adapted.json()["model"] == "sql"
    assert adapted.json()["choices"][0]["text"] != plain.json()["choices"][0]["text"], (
        "the adapter changes the output"
    )
    unloaded = http.post("/v1/unload_lora_adapter", json={"model": "alpha", "lora_name": "sql"})
    assert (unloaded.status_code, unloaded.text) == (
        200,
        "Success: LoRA adapter 'sql' removed successfully.",
    )
    assert complete(http, "sql").status_code == 404


def test_the_installed_command_refuses_a_bad_value_in_one_line_first() -> None:
    refused = run_tritonserver("--http-port", "abc")
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        'tritonserver: Bad option: "--http-port". Invalid option value. Got abc',
        "Usage: tritonserver [options] ('tritonserver --help' lists them)",
    ]


def test_a_model_in_two_repositories_stops_the_start_by_default(tmp_path: Path) -> None:
    for name in ("one", "two"):
        write_json(tmp_path / name / "twin" / "1" / "model.json", ENGINE_ARGS)
    http, grpc, metrics = free_ports(3)
    args = [
        "--model-repository",
        str(tmp_path / "one"),
        "--model-repository",
        str(tmp_path / "two"),
    ]
    ports = [f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}"]
    refused = run_tritonserver(*args, *ports)
    assert refused.returncode == 1
    assert "error: creating server: Internal - failed to load all models" in refused.stderr
    assert "failed to poll model 'twin': not unique across all model repositories" in refused.stderr


@pytest.fixture(scope="module")
def readme_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The README's line as written, in a folder holding the sample repository; the ports come
    from the environment (the line sets none). The last test of the module kills it."""
    folder = tmp_path_factory.mktemp("readme")
    sample = folder / "samples" / "model_repository" / "vllm_model"
    write_json(sample / "1" / "model.json", {**ENGINE_ARGS, "gpu_memory_utilization": 0.5})
    (sample / "config.pbtxt").write_text(SAMPLE_CONFIG)
    http, grpc, metrics = free_ports(3)
    env = {
        "PORT": str(http),
        "GRPC_PORT": str(grpc),
        "METRICS_PORT": str(metrics),
        "HOST": "127.0.0.1",
        "CPU_KVCACHE_SPACE_GIB": "1",
    }
    server = start_tritonserver(
        *README_LAUNCH_LINE,
        http_port=http,
        grpc_port=grpc,
        name="readme-line",
        env=env,
        cwd=folder,
    )
    try:
        yield server
    finally:
        kill_tree(server.process)


def test_the_readme_launch_line_starts_it_unchanged(readme_server: RunningServer) -> None:
    answer = httpx.post(
        f"{readme_server.base_url}/v2/models/vllm_model/generate",
        json={
            "text_input": "What is Triton Inference Server?",
            "parameters": {"stream": False, "temperature": 0},
        },
        timeout=120,
    )
    assert answer.status_code == 200 and answer.json()["text_output"]
    assert model_table(readme_server.log_path.read_text()) == [["vllm_model", "1", "READY"]]


def engine_processes(server_pid: int) -> list[psutil.Process]:
    """The server's descendants but its guardian: the engine core and its workers."""
    return [
        process
        for process in psutil.Process(server_pid).children(recursive=True)
        if not any(part.endswith(GUARDIAN) for part in process.cmdline())
    ]


def running(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_server_killed_with_sigkill_leaves_no_engine_process(
    readme_server: RunningServer,
) -> None:
    """As the kernel's OOM killer kills: vLLM's engine core would outlive the server, holding
    its memory, but for the server's guardian."""
    engines = engine_processes(readme_server.process.pid)
    assert engines, "the server runs its engine core in a process of its own"
    try:
        readme_server.process.send_signal(signal.SIGKILL)
        readme_server.process.wait(timeout=30)
        wait_until(lambda: not running(engines), timeout=60)
    finally:
        for process in running(engines):
            process.kill()
