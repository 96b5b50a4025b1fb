"""A client's image URL through vLLM's own chat parsing (what its chat and Responses serving
run on a request's messages), for a multimodal model: a LLaVA model folder of configuration
only (the default model takes no images, so vLLM refuses its media before any fetch). A
local HTTP server records what it was asked for. And the server running the default model
set the media guard up before it started its engine."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from transformers import CLIPImageProcessor, LlavaConfig
from vllm.config import ModelConfig

from app.engine.vllm_openai.media import CONNECTOR_VARIABLE, REDIRECTS_VARIABLE, guard_media
from tests.support.media_host import MediaHost, media_host_serving
from tests.support.servers import RunningServer
from tests.support.third_party import MODEL_DIR

try:  # 0.32
    from vllm.renderers.chat_utils import parse_chat_messages_async
except ImportError:  # 0.25
    from vllm.entrypoints.chat_utils import (  # type: ignore[no-redef]
        parse_chat_messages_async,
    )


@pytest.fixture(scope="module")
def llava_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LLaVA model as vLLM's parsing reads it: its config, image processor and a tokenizer."""
    folder = tmp_path_factory.mktemp("llava")
    LlavaConfig().save_pretrained(folder)
    CLIPImageProcessor().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(MODEL_DIR / name, folder)
    return folder


@pytest.fixture
def media_host() -> Iterator[MediaHost]:
    """A local server that answers 404, recording what it was asked for."""
    with media_host_serving() as host:
        yield host


async def parse(
    folder: Path, url: str, hosts: list[str] | None, responses_api: bool = False
) -> None:
    """The messages of one chat request with an image at `url`, as vLLM parses them (the
    Responses API's `input_image` part with `responses_api`)."""
    config = ModelConfig(model=str(folder), tokenizer=str(folder), allowed_media_domains=hosts)
    image: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
    if responses_api:
        image = {"type": "input_image", "image_url": url, "detail": "auto"}
    messages: Any = [{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]
    await parse_chat_messages_async(messages, config, "openai")


@pytest.fixture(autouse=True)
def server_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment as the server sets it for its engines."""
    monkeypatch.delenv(CONNECTOR_VARIABLE, raising=False)
    monkeypatch.delenv(REDIRECTS_VARIABLE, raising=False)
    guard_media(4096 * 4096)


def test_an_image_url_is_fetched_only_from_a_host_the_model_lists(
    llava_folder: Path, media_host: MediaHost
) -> None:
    """Both in one event loop: vLLM keeps its HTTP session on the first loop that used it."""
    address, paths = media_host.url, media_host.paths

    async def refused_then_listed() -> None:
        for responses_api in (False, True):
            with pytest.raises(ValueError, match=r"^image_url: remote media URLs are off"):
                await parse(llava_folder, address + "/latest/meta-data", None, responses_api)
        assert paths == []
        with pytest.raises(Exception, match="404"):
            await parse(llava_folder, address + "/cat.png", ["127.0.0.1"])
        assert paths == ["/cat.png"]

    asyncio.run(refused_then_listed())


def test_the_server_set_the_guard_up_before_its_engine_started(server: RunningServer) -> None:
    """What the server's processes were started with after the guard was set up (the engine's
    are spawned once the server has built its engine factory)."""
    wanted = {
        CONNECTOR_VARIABLE: "listed-hosts",
        REDIRECTS_VARIABLE: "0",
        "VLLM_MAX_IMAGE_PIXELS": str(4096 * 4096),
    }
    environments = [
        process.environ() for process in psutil.Process(server.process.pid).children(True)
    ]
    guarded = [env for env in environments if wanted.items() <= env.items()]
    assert guarded, [{name: env.get(name) for name in wanted} for env in environments]
