"""What a load request's override may carry (engine double): the engine-argument allow-list,
paths inside the model's own folder, the file-count and byte limits, the temporary folder
removed after every load, and errors without server paths;
and Triton's poll mode following the repository folder."""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import tritonclient.grpc as triton_grpc
from fastapi.testclient import TestClient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from app.grpc.load_request import LOAD_METHOD, PARAMETERS_FIELD, count_entries
from app.main import create_app
from app.repository.layout import ModelSpec
from app.security.load_overrides import CLIENT_ENGINE_ARGS, check_client_engine_args
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.clients import started_clients
from tests.support.repository import EXPLICIT_CONTROL, write_model
from tests.support.triton_grpc import serve_grpc_app
from tests.support.waiting import wait_until

LOAD = "/v2/repository/models/fake/load"
REFUSED_ENGINE_ARGS = [
    {"trust_remote_code": True},
    {"worker_cls": "evil.Worker"},
    {"worker_extension_cls": "evil.Extension"},
    {"scheduler_cls": "evil.Scheduler"},
    {"logits_processors": ["evil.Processor"]},
    {"reasoning_parser_plugin": "/tmp/evil.py"},
    {"io_processor_plugin": "evil"},
    {"log_config_file": "/etc/passwd"},
    {"kv_transfer_config": {"kv_connector": "evil"}},
    {"otlp_traces_endpoint": "http://attacker.example"},
    {"hf_token": "stolen"},
    {"revision": "main"},
    {"download_dir": "/"},
    {"hf_overrides": {"auto_map": {}}},
    {"enable_prompt_embeds": True},
    {"allowed_local_media_path": "/"},
    {"tokenizer_mode": "custom"},
    {"load_format": "tensorizer"},
    {"generation_config": "/etc"},
]


def file_parameter(content: bytes | str) -> str:
    raw = content.encode() if isinstance(content, str) else content
    return base64.b64encode(raw).decode()


def upload(model_json: dict[str, object], **files: bytes | str) -> dict[str, object]:
    """A load body whose files replace the model folder: model.json and `files` (paths with
    '/' written as '__'), with a `weights/` folder inside version 1."""
    parameters = {"config": "{}", "file:1/model.json": file_parameter(json.dumps(model_json))}
    parameters["file:1/weights/config.json"] = file_parameter("{}")
    parameters.update(
        {
            f"file:{name.replace('__', '/')}": file_parameter(content)
            for name, content in files.items()
        }
    )
    return {"parameters": parameters}


@pytest.fixture
def explicit(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client(FakeEngine(), **EXPLICIT_CONTROL)


@pytest.mark.parametrize("refused", REFUSED_ENGINE_ARGS, ids=lambda args: next(iter(args)))
def test_a_clients_model_json_may_not_set_code_paths_network_or_credentials(
    explicit: TestClient, refused: dict[str, object]
) -> None:
    response = explicit.post(LOAD, json=upload({"model": "weights", **refused}))
    assert response.status_code == 400
    assert f"'{next(iter(refused))}'" in response.json()["error"]
    assert explicit.get("/v2/models/fake/ready").status_code == 200


@pytest.mark.parametrize(
    "model",
    ["/etc", "../../etc", "1/../..", "weights/../../..", "HuggingFaceTB/SmolLM2-135M", "", 5],
)
def test_a_clients_model_path_stays_inside_its_model_folder(
    explicit: TestClient, model: object
) -> None:
    response = explicit.post(LOAD, json=upload({"model": model}))
    assert response.status_code == 400
    assert (
        "'model' must name a file or folder inside the model's own folder"
        in response.json()["error"]
    )


def test_a_link_out_of_the_model_folder_is_refused(tmp_path: Path) -> None:
    version = tmp_path / "fake" / "1"
    version.mkdir(parents=True)
    (version / "weights").symlink_to("/etc", target_is_directory=True)
    with pytest.raises(Exception, match="inside the model's own folder"):
        check_client_engine_args({"model": "weights"}, version)


def test_the_allowed_arguments_load(explicit: TestClient) -> None:
    model_json = {
        "model": "weights",
        "tokenizer": "weights",
        "max_model_len": 64,
        "dtype": "float32",
        "trust_remote_code": False,
        "load_format": "safetensors",
    }
    assert explicit.post(LOAD, json=upload(model_json)).status_code == 200
    assert set(model_json) <= set(CLIENT_ENGINE_ARGS)


def test_a_clients_lora_adapters_stay_inside_its_model_folder(explicit: TestClient) -> None:
    model_json = {"model": "weights", "enable_lora": True}
    outside = upload(model_json, **{"1__multi_lora.json": json.dumps({"a": "/etc"})})
    response = explicit.post(LOAD, json=outside)
    assert response.status_code == 400 and "adapter 'a'" in response.json()["error"]
    inside = upload(model_json, **{"1__multi_lora.json": json.dumps({"a": "weights"})})
    assert explicit.post(LOAD, json=inside).status_code == 200


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"OPENAI_CHAT_TEMPLATE": "/etc/passwd"}, "OPENAI_CHAT_TEMPLATE"),
        ({"OPENAI_CHAT_TEMPLATE": "../../../etc/passwd"}, "OPENAI_CHAT_TEMPLATE"),
        ({"OPENAI_TRUST_REQUEST_CHAT_TEMPLATE": "true"}, "OPENAI_TRUST_REQUEST_CHAT_TEMPLATE"),
    ],
)
def test_a_clients_config_may_not_read_files_or_open_templates(
    explicit: TestClient, parameters: dict[str, str], message: str
) -> None:
    config = {"parameters": {key: {"string_value": value} for key, value in parameters.items()}}
    response = explicit.post(LOAD, json={"parameters": {"config": json.dumps(config)}})
    assert response.status_code == 400 and message in response.json()["error"]


def test_an_inline_chat_template_is_taken(explicit: TestClient) -> None:
    config = {"parameters": {"OPENAI_CHAT_TEMPLATE": {"string_value": "{{ messages[0].content }}"}}}
    assert (
        explicit.post(LOAD, json={"parameters": {"config": json.dumps(config)}}).status_code == 200
    )


def test_more_files_than_the_limit_are_refused_before_any_is_read(
    make_client: Callable[..., TestClient],
) -> None:
    client = make_client(FakeEngine(), **EXPLICIT_CONTROL, load_override_max_files=3)
    files = {f"file:1/f{i}": "not base64!" for i in range(4)}
    response = client.post(LOAD, json={"parameters": {"config": "{}", **files}})
    assert response.status_code == 400
    assert (
        response.json()["error"]
        == "load parameters: 4 'file:' overrides, above this server's limit of 3"
    )


def test_more_bytes_than_the_limit_are_refused_before_any_is_written(
    make_client: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    folders: list[str] = []
    make_folder = tempfile.mkdtemp

    def recorded(**options: Any) -> str:
        folders.append(make_folder(**options))
        return folders[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recorded)
    client = make_client(FakeEngine(), **EXPLICIT_CONTROL, max_override_bytes=1000)
    files = {"file:1/model.json": file_parameter(b"{}"), "file:1/w": file_parameter(b"x" * 999)}
    response = client.post(LOAD, json={"parameters": {"config": "{}", **files}})
    assert (response.status_code, response.json()) == (
        400,
        {
            "error": "load parameters: 'file:' overrides of 1001 bytes in all, above this "
            "server's limit of 1000 bytes"
        },
    )
    assert folders == []
    within = upload({"model": "weights"}, **{"1__w": b"x" * 900})
    assert client.post(LOAD, json=within).status_code == 200
    assert len(folders) == 1


def test_a_grpc_load_over_the_byte_limit_is_refused(repository: Path) -> None:
    settings = {**EXPLICIT_CONTROL, "max_override_bytes": 1000}
    with serve_grpc_app(repository, lambda spec: FakeEngine(), **settings) as served:
        client = triton_grpc.InferenceServerClient(served.grpc_url)
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("fake", config="{}", files={"file:1/w": b"x" * 1001})
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert refused.value.message() == (
        "load parameters: 'file:' overrides of 1001 bytes in all, above this server's limit "
        "of 1000 bytes"
    )


def test_the_override_folder_is_kept_while_its_model_is_loaded_and_removed_after(
    repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    engines = Engines(FakeEngine(), FakeEngine(), FakeEngine(start_error=RuntimeError("no")))
    settings = Settings(model_repository=[repository], **EXPLICIT_CONTROL)
    with started_clients() as start:
        client = start(create_app(settings, engine_factory=engines))
        assert client.post(LOAD, json=upload({"model": "weights"})).status_code == 200
        assert client.post(LOAD, json=upload({"model": "weights"})).status_code == 400
        loaded, failed = (spec.version_path for spec in engines.made[1:])
        assert loaded.is_dir() and not failed.exists()
        assert client.post(LOAD, json=upload({"model": "weights"})).status_code == 200
        assert not loaded.exists() and engines.made[-1].version_path.is_dir()
        assert client.post(LOAD).status_code == 200
        assert not list(temporary.iterdir())
        assert client.post(LOAD, json=upload({"model": "weights"})).status_code == 200
        assert client.post("/v2/repository/models/fake/unload").status_code == 200
        assert not list(temporary.iterdir())
        assert client.post(LOAD, json=upload({"model": "weights"})).status_code == 200
    assert not list(temporary.iterdir())


def test_a_failed_reload_in_place_removes_the_folder_its_stopped_engines_ran_from(
    repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    engines = Engines(FakeEngine(), FakeEngine(), FakeEngine(start_error=RuntimeError("no")))
    settings = Settings(model_repository=[repository], reload_in_place=True, **EXPLICIT_CONTROL)
    with started_clients() as start:
        client = start(create_app(settings, engine_factory=engines))
        assert client.post(LOAD, json=upload({"model": "weights"})).status_code == 200
        assert len(list(temporary.iterdir())) == 1
        assert client.post(LOAD, json=upload({"model": "weights"})).status_code == 400
        assert client.get("/v2/models/fake/ready").status_code == 404
        assert not list(temporary.iterdir())


def test_load_errors_name_no_server_path(explicit: TestClient, repository: Path) -> None:
    bad_json = explicit.post(
        LOAD, json=upload({"model": "weights"}, **{"1__model.json": "{not json"})
    )
    broken = repository / "fake" / "1" / "model.json"
    broken.write_text("[1]")
    from_repository = explicit.post(LOAD)
    for response in (bad_json, from_repository):
        assert response.status_code == 400
        message = response.json()["error"]
        assert (
            "model-override" not in message
            and "/tmp" not in message
            and str(repository) not in message
        )
        assert "fake/1/model.json" in message
    index = {entry["name"]: entry for entry in explicit.post("/v2/repository/index").json()}
    assert str(repository) not in json.dumps(index)


class Engines:
    """An engine factory that records each spec, making the given engines first."""

    def __init__(self, *engines: FakeEngine) -> None:
        self.made: list[ModelSpec] = []
        self._engines = list(engines)

    def __call__(self, spec: ModelSpec) -> FakeEngine:
        self.made.append(spec)
        return self._engines.pop(0) if self._engines else FakeEngine()


def test_poll_mode_follows_the_repository_folder(tmp_path: Path) -> None:
    root = tmp_path / "polled"
    write_model(root, "fake")
    engines = Engines()
    settings = Settings(
        model_repository=[root], model_control_mode="poll", repository_poll_secs=0.1
    )
    with started_clients() as start:
        client = start(create_app(settings, engine_factory=engines))
        assert client.post("/v2/repository/models/fake/load").status_code == 503
        write_model(root, "added", model="added-model")
        wait_until(lambda: client.get("/v2/models/added/ready").status_code == 200, timeout=10)
        write_model(root, "added", model="changed-model")
        wait_until(lambda: engines.made[-1].engine_args["model"] == "changed-model", timeout=10)
        assert client.get("/v2/models/added/ready").status_code == 200
        shutil.rmtree(root / "added")
        wait_until(lambda: client.get("/v2/models/added/ready").status_code == 404, timeout=10)
        assert [spec.name for spec in engines.made] == ["fake", "added", "added"]


def test_a_grpc_load_with_150000_files_is_refused_before_it_is_parsed(repository: Path) -> None:
    """The wire count refuses it (its own message); parsed, the message would be counted
    and refused with the number of files."""
    message = service_pb2.RepositoryModelLoadRequest(model_name="fake")
    message.parameters["config"].string_param = "{}"
    for index in range(150_000):
        message.parameters[f"file:1/f{index}"].bytes_param = b""
    data = message.SerializeToString()
    assert count_entries(data, PARAMETERS_FIELD, 65) == 66
    with (
        serve_grpc_app(repository, lambda spec: FakeEngine(), **EXPLICIT_CONTROL) as served,
        grpc.insecure_channel(
            served.grpc_url, options=[("grpc.max_send_message_length", 1 << 24)]
        ) as channel,
    ):
        load = channel.unary_unary(LOAD_METHOD)
        with pytest.raises(grpc.RpcError) as refused:
            load(data, timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (
            refused.value.details()
            == "load parameters: more than 64 'file:' overrides, above this server's limit"
        )
        load(
            service_pb2.RepositoryModelLoadRequest(model_name="fake").SerializeToString(),
            timeout=30,
        )


@pytest.mark.parametrize(
    "colliding", [{"1__weights__config.json__x": b"{}"}, {"1__model.json__inner": b"{}"}]
)
def test_files_in_each_others_way_are_a_400_naming_the_file(
    explicit: TestClient, colliding: dict[str, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    response = explicit.post(LOAD, json=upload({"model": "weights"}, **colliding))
    assert response.status_code == 400
    assert "another file of the request has its place" in response.json()["error"]
    assert "Traceback" not in caplog.text
