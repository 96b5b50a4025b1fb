"""The OpenAI API over a repository of several versions and LoRA adapters (real engines).

One server for this module, on a temporary repository:
    alpha/1  smollm2 with LoRA enabled and one adapter made here with peft
    alpha/2  smollm2
    broken/1 smollm2 with a tool-call parser that does not fit its tokenizer (llama3_json);
             not loaded at start
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import httpx
import openai
import psutil
import pytest

from tests.integration.test_repository_real_engine import MODEL_DIR, make_adapter, write_json
from tests.support.openai_api import body_of, extra_of
from tests.support.servers import EXPLICIT_CONTROL_ENV, RunningServer, start_server

pytestmark = pytest.mark.usefixtures("several_engines")

PROMPT = "The best way to learn a language is"
BROKEN_CONFIG = """
parameters: { key: "OPENAI_TOOL_CALL_PARSER" value: { string_value: "llama3_json" } }
parameters: { key: "OPENAI_ENABLE_AUTO_TOOL_CHOICE" value: { string_value: "true" } }
"""


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("repository")
    engine_args = {"model": str(MODEL_DIR), "enforce_eager": True, "max_model_len": 1024}
    write_json(
        root / "alpha" / "1" / "model.json",
        {**engine_args, "enable_lora": True, "max_lora_rank": 8},
    )
    write_json(root / "alpha" / "1" / "multi_lora.json", {"doc": "adapters/doc"})
    make_adapter(root / "alpha" / "1" / "adapters" / "doc")
    write_json(root / "alpha" / "2" / "model.json", engine_args)
    (root / "alpha" / "config.pbtxt").write_text("version_policy: { all { } }")
    write_json(root / "broken" / "1" / "model.json", engine_args)
    (root / "broken" / "config.pbtxt").write_text(BROKEN_CONFIG)
    server = start_server(
        "--model-repository",
        str(root),
        "--models",
        "alpha",
        name="openai-lora",
        env=EXPLICIT_CONTROL_ENV,
    )
    yield server
    code, alive = server.stop(signal.SIGTERM)
    for process in alive:
        process.kill()
    assert code == 0 and not alive


@pytest.fixture(scope="module")
def sdk(lora_server: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{lora_server.base_url}/v1", api_key="none", max_retries=0, timeout=120
    ) as client:
        yield client


def test_models_list_the_versions_and_the_adapter(sdk: openai.OpenAI) -> None:
    cards = {card.id: card for card in sdk.models.list().data}
    assert set(cards) == {"alpha", "alpha/1", "alpha/2", "doc"}
    doc, alpha = extra_of(cards["doc"]), extra_of(cards["alpha"])
    assert doc["parent"] == "alpha/1" and doc["root"].endswith("alpha/1/adapters/doc")
    assert alpha["parent"] is None


def test_the_adapter_answers_as_the_triton_route_with_lora_name(
    sdk: openai.OpenAI, lora_server: RunningServer
) -> None:
    parameters = {
        "temperature": 0,
        "max_tokens": 16,
        "apply_chat_template": False,
        "lora_name": "doc",
    }
    triton = httpx.post(
        f"{lora_server.base_url}/v2/models/alpha/versions/1/generate",
        json={"text_input": PROMPT, "exclude_input_in_output": True, "parameters": parameters},
        timeout=120,
    ).json()["text_output"]
    adapted = sdk.completions.create(model="doc", prompt=PROMPT, max_tokens=16, temperature=0)
    assert adapted.model == "doc" and adapted.choices[0].text == triton
    plain = sdk.completions.create(model="alpha/1", prompt=PROMPT, max_tokens=16, temperature=0)
    assert plain.model == "alpha" and plain.choices[0].text != triton
    chat = sdk.chat.completions.create(
        model="alpha/1/doc", messages=[{"role": "user", "content": PROMPT}], max_tokens=8
    )
    assert chat.model == "doc" and chat.choices[0].message.content


def test_a_version_without_the_adapter_is_not_asked_for_it(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.completions.create(model="alpha/2/doc", prompt=PROMPT, max_tokens=2)
    assert body_of(missing.value)["param"] == "model"


def engine_cores(server: RunningServer) -> int:
    children = psutil.Process(server.process.pid).children(recursive=True)
    return sum(
        1
        for child in children
        if child.is_running()
        and "EngineCore" in child.name()
        and child.status() != psutil.STATUS_ZOMBIE
    )


def test_openai_options_that_do_not_fit_the_model_fail_its_load(
    lora_server: RunningServer, sdk: openai.OpenAI
) -> None:
    cores = engine_cores(lora_server)
    response = httpx.post(f"{lora_server.base_url}/v2/repository/models/broken/load", timeout=300)
    assert response.status_code == 400
    message = response.json()["error"]
    assert (
        "broken/config.pbtxt" in message and "OpenAI options" in message and "python_tag" in message
    )
    assert engine_cores(lora_server) == cores
    assert "broken" not in {card.id for card in sdk.models.list().data}
