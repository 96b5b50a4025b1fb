"""What a load request's own JSON files may name (engine double): no key that vLLM or
transformers follows to another model, tokenizer or file (a speculators config's verifier,
`tokenizer_file`, `text_model_id`, ...), no label that is an absolute path or climbs out with
`..`; refused 400 naming the file and the key, before any engine is made. A real model's
files, and labels that only name where a model came from, load."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.errors import ModelConfigError
from app.main import create_app
from app.paths import PROJECT_ROOT
from app.repository.layout import ModelSpec
from app.security.uploaded_files import check_uploaded_files
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.support.repository import EXPLICIT_CONTROL

LOAD = "/v2/repository/models/fake/load"
SMOLLM2 = PROJECT_ROOT / ".cache" / "models" / "smollm2"
SPECULATORS = {
    "speculators_model_type": "eagle3",
    "transformer_layer_config": {"model_type": "llama"},
    "speculators_config": {
        "proposal_methods": [{"proposal_type": "eagle3", "speculative_tokens": 3}],
        "verifier": {"name_or_path": "/srv/models/other", "architectures": ["LlamaForCausalLM"]},
    },
}
REFUSED = [
    ("config.json", SPECULATORS, "speculators_config"),
    ("config.json", {"speculators_config": {}}, "speculators_config"),
    ("config.json", {"_name_or_path": "/srv/models/other"}, "_name_or_path"),
    ("config.json", {"_name_or_path": "../../../other"}, "_name_or_path"),
    ("config.json", {"text_config": {"_name_or_path": "~/models"}}, "text_config._name_or_path"),
    ("config.json", {"text_model_id": "org/model"}, "text_model_id"),
    ("config.json", {"configuration_files": ["../../x/config.json"]}, "configuration_files"),
    ("tokenizer_config.json", {"tokenizer_file": "/srv/t/tokenizer.json"}, "tokenizer_file"),
    ("tokenizer_config.json", {"vocab_file": "../vocab.json"}, "vocab_file"),
    ("tokenizer_config.json", {"special_tokens_map_file": "/x.json"}, "special_tokens_map_file"),
    ("tokenizer_config.json", {"fast_tokenizer_files": ["../t.json"]}, "fast_tokenizer_files"),
    ("processor_config.json", {"tokenizer": "org/tokenizer"}, "tokenizer"),
    (
        "adapter/adapter_config.json",
        {"base_model_name_or_path": "/srv/m"},
        "base_model_name_or_path",
    ),
]
ACCEPTED = [
    {"_name_or_path": "HuggingFaceTB/SmolLM2-135M", "tokenizer_file": None},
    {"name_or_path": "my model, epoch 2", "configuration_files": ["config.4.0.json"]},
    {"model": {"type": "BPE", "merges": ["../ ..", "/ /"]}, "auto_map": {"AutoConfig": "c.C"}},
]


def b64(content: bytes | str) -> str:
    return base64.b64encode(content.encode() if isinstance(content, str) else content).decode()


def upload(files: dict[str, Any]) -> dict[str, object]:
    """A load body: model.json naming `weights` in version 1, and `files` in that folder."""
    parameters = {"config": "{}", "file:1/model.json": b64(json.dumps({"model": "weights"}))}
    for name, content in files.items():
        text = content if isinstance(content, (str, bytes)) else json.dumps(content)
        parameters[f"file:1/weights/{name}"] = b64(text)
    return {"parameters": parameters}


class Engines:
    """An engine factory recording the spec of every engine it makes."""

    def __init__(self) -> None:
        self.made: list[ModelSpec] = []

    def __call__(self, spec: ModelSpec) -> FakeEngine:
        self.made.append(spec)
        return FakeEngine()


Served = tuple[TestClient, Engines]


@pytest.fixture
def served(repository: Path) -> Iterator[Served]:
    engines = Engines()
    settings = Settings(model_repository=[repository], **EXPLICIT_CONTROL)
    with TestClient(create_app(settings, engine_factory=engines)) as client:
        yield client, engines


@pytest.mark.parametrize(("name", "content", "key"), REFUSED, ids=[key for *_, key in REFUSED])
def test_a_reference_out_of_the_model_folder_is_refused_naming_file_and_key(
    served: Served, name: str, content: dict[str, Any], key: str
) -> None:
    client, engines = served
    made = len(engines.made)
    response = client.post(LOAD, json=upload({"config.json": {}, name: content}))
    assert response.status_code == 400
    assert f"load request file '1/weights/{name}': '{key}' " in response.json()["error"]
    assert len(engines.made) == made
    assert client.get("/v2/models/fake/ready").status_code == 200


@pytest.mark.parametrize("content", ACCEPTED)
def test_labels_and_the_folders_own_names_are_accepted(served: Served, content: Any) -> None:
    client, _ = served
    assert client.post(LOAD, json=upload({"config.json": content})).status_code == 200


def test_a_real_models_files_load(served: Served) -> None:
    client, engines = served
    names = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
    files = {name: (SMOLLM2 / name).read_bytes() for name in names}
    assert client.post(LOAD, json=upload(files)).status_code == 200
    assert Path(engines.made[-1].engine_args["model"]).name == "weights"


@pytest.mark.parametrize("content", ["{not json", "[" * 100_000 + "]" * 100_000])
def test_a_json_file_that_cannot_be_read_is_refused(served: Served, content: str) -> None:
    client, _ = served
    response = client.post(LOAD, json=upload({"config.json": content}))
    assert response.status_code == 400
    assert "load request file '1/weights/config.json': not valid JSON" in response.json()["error"]


def test_the_servers_own_files_are_left_to_their_rules(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.json").write_text(json.dumps({"model": "/elsewhere"}))
    (tmp_path / "1" / "multi_lora.json").write_text(json.dumps({"a": "/elsewhere"}))
    check_uploaded_files(tmp_path)
    (tmp_path / "1" / "x.json").write_text(json.dumps([{"tokenizer": "/elsewhere"}]))
    with pytest.raises(ModelConfigError, match=r"'1/x.json': '\[0\].tokenizer' names"):
        check_uploaded_files(tmp_path)
