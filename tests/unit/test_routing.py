"""Routing between a model's instances: least loaded (ties round-robin), prefix-aware (the same
prefix to the same instance in every process, unless it is much busier), LoRA adapters in the
key, and the pin header over every protocol, with the engine double."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as triton_grpc
from fastapi.testclient import TestClient

from app.core.routing import (
    BLOCK_TOKENS,
    PIN_HEADER,
    InstanceRouter,
    RouteHint,
    RoutingMode,
    RoutingPolicy,
    prefix_key,
    rendezvous,
)
from app.main import create_app
from app.openai.routing import route_hint
from app.repository.layout import ModelSpec
from app.settings import Settings
from tests.doubles import FakeEngine, word_tokens
from tests.support.clients import started_clients
from tests.support.repository import write_model
from tests.support.triton_grpc import serve_grpc_app, stream_results, vllm_request

PREFIX = RoutingPolicy(RoutingMode.PREFIX)
TWO_CPU = "instance_group [{ kind: KIND_CPU count: 2 }]"
PREFIXES = [" ".join(f"doc{n}-word{i}" for i in range(40)) for n in range(8)]
"""Eight prompts' shared beginnings: 40 words, 40 tokens of the engine double."""


def routing_config(mode: str = "least_loaded", extra: str = "") -> str:
    parameter = f'parameters {{ key: "INSTANCE_ROUTING" value: {{ string_value: "{mode}" }} }}'
    return f"{TWO_CPU}\n{parameter}\n{extra}"


class InstanceEngines:
    """An engine factory keeping each instance's engines (the double)."""

    def __init__(self) -> None:
        self.by_instance: dict[int, list[FakeEngine]] = {}

    def __call__(self, spec: ModelSpec) -> FakeEngine:
        engine = FakeEngine()
        self.by_instance.setdefault(spec.instance.index, []).append(engine)
        return engine

    def served(self, index: int) -> list[str]:
        """The prompts the instance's engines received."""
        return [r.prompt for e in self.by_instance[index] for r in e.requests]


@pytest.fixture
def two_instances(tmp_path: Path) -> Iterator[Callable[..., tuple[TestClient, InstanceEngines]]]:
    with started_clients() as start:

        def build(config: str = TWO_CPU, **settings: Any) -> tuple[TestClient, InstanceEngines]:
            write_model(tmp_path / "repo", "fake", config=config)
            engines = InstanceEngines()
            app = create_app(
                Settings(model_repository=[tmp_path / "repo"], **settings), engine_factory=engines
            )
            return start(app), engines

        yield build


def generate(client: TestClient, prompt: str, **headers: str) -> Any:
    body = {"text_input": prompt, "parameters": {"max_tokens": 1}}
    return client.post("/v2/models/fake/generate", json=body, headers=headers)


def test_least_loaded_spreads_evenly_and_breaks_ties_round_robin() -> None:
    router = InstanceRouter(RoutingPolicy())
    loads = {0: 0, 1: 0, 2: 0}
    for _ in range(9):
        loads[router.choose(loads)] += 1
    assert loads == {0: 3, 1: 3, 2: 3}
    picks = [router.choose({0: 5, 1: 5}) for _ in range(4)]
    assert sorted(picks[:2]) == [0, 1] and picks == picks[:2] * 2
    assert router.choose({0: 3, 1: 1, 2: 2}) == 1


def test_a_prefix_sticks_to_one_instance_the_same_in_every_process() -> None:
    first, second = InstanceRouter(PREFIX), InstanceRouter(PREFIX)  # two frontend processes
    loads = {0: 0, 1: 0}
    chosen = {}
    for prefix in PREFIXES:
        keys = [prefix_key(word_tokens(f"{prefix} {suffix}"), None, 64) for suffix in "abc"]
        picks = {first.choose(loads, key) for key in keys} | {second.choose(loads, keys[0])}
        assert len(picks) == 1, prefix
        chosen[prefix] = picks.pop()
    assert set(chosen.values()) == {0, 1}, "eight prefixes all on one instance"


def test_the_key_is_whole_blocks_of_the_leading_tokens_and_the_adapter() -> None:
    tokens = list(range(100))
    assert prefix_key(tokens, None, 64) == prefix_key([*tokens[:64], 7, 7], None, 64)
    assert prefix_key(tokens[:40], None, 64) == prefix_key([*tokens[:32], 9], None, 64)
    assert prefix_key(tokens[: BLOCK_TOKENS - 1], None, 64) is None
    assert prefix_key(tokens, "sql", 64) != prefix_key(tokens, None, 64)
    assert prefix_key(tokens, "sql", 64) == prefix_key([*tokens[:64], 1], "sql", 64)
    assert prefix_key([], "sql", 64) is not None  # an adapter's short prompts stick together


def test_only_the_keys_of_an_instance_that_goes_away_move() -> None:
    keys = [prefix_key(list(range(n, n + 16)), None, 64) for n in range(200)]
    before = {key: rendezvous(key, [0, 1, 2]) for key in keys if key is not None}
    after = {key: rendezvous(key, [0, 2]) for key in before}
    assert all(after[key] == index for key, index in before.items() if index != 1)
    assert Counter(before.values()).keys() == {0, 1, 2}


def test_the_preferred_instance_is_passed_over_when_much_busier() -> None:
    router = InstanceRouter(RoutingPolicy(RoutingMode.PREFIX, busy_margin=8))
    key = next(
        k
        for n in range(100)
        if (k := prefix_key(list(range(n, n + 16)), None, 64)) and rendezvous(k, [0, 1]) == 0
    )
    assert router.choose({0: 8, 1: 0}, key) == 0  # 8 more: within the margin
    assert router.choose({0: 9, 1: 0}, key) == 1  # 9 more: much busier
    assert router.choose({0: 30, 1: 20}, key) == 0  # 10 more, but not twice as many
    assert router.choose({0: 41, 1: 20}, key) == 1
    assert router.choose({0: 9, 1: 0}, None) == 1  # no key: least loaded


def test_a_two_instance_model_spreads_requests_over_both_engines(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]],
) -> None:
    client, engines = two_instances()
    for n in range(6):
        assert generate(client, f"question {n}").status_code == 200
    assert [len(engines.served(index)) for index in (0, 1)] == [3, 3]


def test_prefix_routing_sends_a_prefix_to_one_engine_over_triton_and_openai(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]],
) -> None:
    client, engines = two_instances(routing_config("prefix"))
    for prefix in PREFIXES:
        for suffix in ("first", "second"):
            assert generate(client, f"{prefix} {suffix}").status_code == 200
        body = {"model": "fake", "prompt": f"{prefix} third", "max_tokens": 1}
        assert client.post("/v1/completions", json=body).status_code == 200
        chat = {"model": "fake", "messages": [{"role": "user", "content": f"{prefix} 4th"}]}
        assert client.post("/v1/chat/completions", json=chat).status_code == 200
    for prefix in PREFIXES:
        for is_chat in (False, True):  # a chat's key is its messages' text, roles and all
            holders = {
                index
                for index in (0, 1)
                for prompt in engines.served(index)
                if prompt.startswith(prefix) and prompt.endswith("4th") == is_chat
            }
            assert len(holders) == 1, (prefix, is_chat)
    assert engines.served(0) and engines.served(1), "every prefix on one instance"


@pytest.mark.parametrize("route", ["/v2/models/fake/generate", "/v1/completions"])
def test_a_pin_chooses_the_instance_and_a_bad_one_is_a_400_naming_the_header(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]], route: str
) -> None:
    client, engines = two_instances(allow_instance_pin=True)
    if route.startswith("/v1"):
        body: dict[str, Any] = {"model": "fake", "prompt": "hi", "max_tokens": 1}
    else:
        body = {"text_input": "hi", "parameters": {"max_tokens": 1}}
    for _ in range(3):
        assert client.post(route, json=body, headers={PIN_HEADER: "1"}).status_code == 200
    assert [len(engines.served(index)) for index in (0, 1)] == [0, 3]
    for bad in ("2", "x", "-1"):
        response = client.post(route, json=body, headers={PIN_HEADER: bad})
        assert response.status_code == 400, response.text
        text = response.text
        assert f"x-triton-instance: model 'fake' has instances 0 to 1, got '{bad}'" in text


def test_without_the_setting_a_pin_header_is_ignored(
    two_instances: Callable[..., tuple[TestClient, InstanceEngines]],
) -> None:
    client, engines = two_instances()
    for _ in range(4):
        assert generate(client, "hi", **{PIN_HEADER: "7"}).status_code == 200
    assert [len(engines.served(index)) for index in (0, 1)] == [2, 2]


def test_a_pin_in_grpc_metadata(tmp_path: Path) -> None:
    write_model(tmp_path / "repo", "fake", config=TWO_CPU)
    engines = InstanceEngines()
    with serve_grpc_app(tmp_path / "repo", engines, allow_instance_pin=True) as app:
        client = triton_grpc.InferenceServerClient(app.grpc_url)
        requests = [vllm_request("hi", request_id=str(n)) for n in range(3)]
        results = stream_results(client, requests, headers={PIN_HEADER: "0"})
        assert all(error is None for _, error in results)
        assert [len(engines.served(index)) for index in (0, 1)] == [3, 0]
        (_, error), *_ = stream_results(client, requests[:1], headers={PIN_HEADER: "5"})
        client.close()
    assert error is not None and "x-triton-instance: model 'fake' has instances 0 to 1" in str(
        error
    )


def test_an_openai_request_routes_by_its_prompt_its_token_ids_or_its_messages() -> None:
    headers = {PIN_HEADER: "1"}
    assert route_hint("Hello there", "sql", headers) == RouteHint("Hello there", None, "sql", "1")
    assert route_hint(["first", "second"], None, {}).text == "first"
    assert route_hint([[5, 6, 7], [8]], None, {}).token_ids == [5, 6, 7]
    assert route_hint([5, 6, 7], None, {}).token_ids == [5, 6, 7]
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image_url"}]},
    ]
    assert route_hint(messages, None, {}).text == "system\nYou are terse.\nuser\nHi"
    assert route_hint({"odd": 1}, None, {}) == RouteHint()
