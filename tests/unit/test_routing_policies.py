"""The routing policies between a model's instances as pure functions and on a served model of
two engine doubles: load read from the engines' reports (shared by every frontend process,
plus what this one sent since, never less than its own share), cache-aware routing (the
cached tokens blended with the load: equal caches route as least-loaded does, a long hit
outweighs a little load, never a lot), and their fallbacks (no reports, no cache index)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.core.kv_index import KvBlockIndex
from app.core.load_view import EngineLoad, EngineSignals, LoadBoard
from app.core.routing import (
    InstanceRouter,
    InstanceView,
    LoadView,
    RouteHint,
    RoutingMode,
    RoutingPolicy,
    load_score,
)
from app.repository.instances import InstanceKind, ModelInstance
from app.repository.layout import ModelSpec
from app.repository.served_model import ModelState, ServedModel
from tests.doubles import FakeEngine, word_tokens

CACHE_AWARE = RoutingPolicy(RoutingMode.CACHE_AWARE, hit_tokens=64)
STICKY = RoutingPolicy(RoutingMode.CACHE_AWARE, hit_tokens=16)
"""A prompt's 64 cached tokens outweigh 4 requests."""
BLOCK = 16


def report(running: int, waiting: int = 0, kv_usage: float = 0.1) -> EngineLoad:
    return EngineLoad(running, waiting, kv_usage, serial=1)


def test_without_a_report_the_load_is_this_processes_share() -> None:
    assert load_score(InstanceView(admitted=3)) == 3
    assert load_score(InstanceView(admitted=3, clients=4)) == 12


def test_the_engines_report_counts_with_what_was_sent_since() -> None:
    view = InstanceView(admitted=1, report=report(running=6, waiting=2), pending=3, clients=2)
    assert load_score(view) == 11
    floor = InstanceView(admitted=5, report=report(running=2), clients=4)
    assert load_score(floor) == 20  # never less than this process's share


def test_waiting_requests_weigh_more_on_a_filling_kv_cache() -> None:
    calm = InstanceView(0, report(running=10, waiting=4, kv_usage=0.5))
    full = InstanceView(0, report(running=10, waiting=4, kv_usage=1.0))
    assert load_score(calm) == 14
    assert load_score(full) == 14 + 4 * 3
    assert load_score(InstanceView(0, report(running=10, kv_usage=1.0))) == 10


def test_least_loaded_breaks_ties_in_turn() -> None:
    router = InstanceRouter(RoutingPolicy())
    assert [router.choose({0: 2.0, 1: 2.0}) for _ in range(4)] == [0, 1, 0, 1]
    assert router.choose({0: 2.5, 1: 2.0}) == 1


def test_cache_aware_with_equal_caches_routes_as_least_loaded() -> None:
    aware, least = InstanceRouter(CACHE_AWARE), InstanceRouter(RoutingPolicy())
    for loads in ({0: 3.0, 1: 5.0}, {0: 4.0, 1: 4.0}, {0: 9.0, 1: 1.0}):
        for cached in ({0: 0, 1: 0}, {0: 512, 1: 512}, None):
            assert aware.choose(loads, cached=cached) == least.choose(loads)


def test_a_long_hit_outweighs_a_little_load_but_never_a_lot() -> None:
    router = InstanceRouter(CACHE_AWARE)
    assert router.choose({0: 10.0, 1: 4.0}, cached={0: 1024, 1: 0}) == 0  # 16 requests' worth
    assert router.choose({0: 30.0, 1: 4.0}, cached={0: 1024, 1: 0}) == 1
    assert router.choose({0: 3.0, 1: 0.0}, cached={0: 128, 1: 0}) == 1  # short hit: idle wins
    assert router.choose({0: 5.0, 1: 5.0}, cached={0: 0, 1: 16}) == 1
    assert router.costs({0: 5.0, 1: 5.0}, {1: 128}) == {0: 5.0, 1: 3.0}


def test_a_hit_never_sends_a_request_to_a_much_busier_instance() -> None:
    router = InstanceRouter(STICKY)  # 1,024 cached tokens: 64 requests' worth
    assert router.choose({0: 12.0, 1: 5.0}, cached={0: 1024, 1: 0}) == 0
    assert router.choose({0: 14.0, 1: 5.0}, cached={0: 1024, 1: 0}) == 1  # 9 more, 2.8x
    assert router.choose({0: 90.0, 1: 50.0}, cached={0: 1024, 1: 0}) == 0  # not twice as many
    assert router.choose({0: 101.0, 1: 50.0}, cached={0: 1024, 1: 0}) == 1


def two_engines(policy: RoutingPolicy) -> tuple[ServedModel, list[FakeEngine]]:
    instances = tuple(ModelInstance(i, f"m_{i}", InstanceKind.CPU) for i in range(2))
    spec = ModelSpec("m", "1", Path("."), {}, instances=instances, routing=policy)
    engines = [FakeEngine(), FakeEngine()]
    for engine in engines:
        engine.routing_signals = EngineSignals(  # type: ignore[attr-defined]
            LoadBoard(), KvBlockIndex(capacity=1000, depth=64, block_size=BLOCK), clients=1
        )
    return ServedModel(spec, state=ModelState.READY, engines=engines), engines


def signals(engine: FakeEngine) -> EngineSignals:
    found: EngineSignals = engine.routing_signals  # type: ignore[attr-defined]
    return found


def cache_prompt(engine: FakeEngine, prompt: str) -> None:
    """The engine's KV cache now holds `prompt`'s whole blocks (as its events would say)."""
    tokens = word_tokens(prompt)
    whole = len(tokens) // BLOCK
    hashes = [hash((prompt, n)) for n in range(whole)]
    assert signals(engine).cache is not None
    signals(engine).cache.stored(None, hashes, tokens[: whole * BLOCK], BLOCK)  # type: ignore[union-attr]


async def test_an_engine_reporting_more_load_gets_the_next_requests_elsewhere() -> None:
    served, engines = two_engines(RoutingPolicy())
    signals(engines[0]).board.write(12, 3, 0.2)
    signals(engines[1]).board.write(4, 0, 0.2)
    picks = [(await served.route()).instance.index for _ in range(11)]
    assert picks[:11] == [1] * 11  # 4 + 11 sent since the report: 15 against 15
    assert (await served.route()).instance.index in (0, 1)
    signals(engines[1]).board.write(20, 0, 0.2)  # a newer report: the sent ones are in it
    assert (await served.route()).instance.index == 0


async def test_the_process_view_ignores_the_reports() -> None:
    served, engines = two_engines(RoutingPolicy(load_view=LoadView.PROCESS))
    signals(engines[0]).board.write(50, 50, 0.9)
    picks = [(await served.route()).instance.index for _ in range(4)]
    assert sorted(picks) == [0, 0, 1, 1]


async def test_cache_aware_sends_a_prompt_to_the_engine_holding_its_prefix() -> None:
    served, engines = two_engines(STICKY)
    prefix = " ".join(f"w{n}" for n in range(64))
    cache_prompt(engines[1], prefix)
    for question in range(4):
        slot = await served.route(RouteHint(f"{prefix} question {question}"))
        assert slot.instance.index == 1
        slot.admitted += 1  # still running: 4 requests against none
    other = await served.route(RouteHint("an unrelated prompt"))
    assert other.instance.index == 0


async def test_cache_aware_matches_the_prompt_as_the_chat_template_wraps_it() -> None:
    served, engines = two_engines(STICKY)
    prefix = " ".join(f"w{n}" for n in range(64))
    cache_prompt(engines[0], engines[0].render_chat_prompt(prefix))
    signals(engines[0]).board.write(2, 0, 0.1)
    assert (await served.route(RouteHint(prefix))).instance.index == 1  # no match: by load
    hint = RouteHint(prefix, chat_template=True)
    assert [(await served.route(hint)).instance.index for _ in range(2)] == [0, 0]


async def test_cache_aware_without_an_index_routes_by_load() -> None:
    served, engines = two_engines(STICKY)
    for engine in engines:
        engine.routing_signals = EngineSignals(LoadBoard())  # type: ignore[attr-defined]
    prefix = " ".join(f"w{n}" for n in range(64))
    picks = [(await served.route(RouteHint(prefix))).instance.index for _ in range(4)]
    assert sorted(picks) == [0, 0, 1, 1]


async def test_requests_sharing_a_prefix_follow_the_first_before_the_engine_stores_it() -> None:
    served, _ = two_engines(STICKY)
    prefix = " ".join(f"w{n}" for n in range(64))
    first = await served.route(RouteHint(f"{prefix} question 0"))
    first.admitted += 1
    for question in range(1, 4):
        slot = await served.route(RouteHint(f"{prefix} question {question}"))
        assert slot is first
        slot.admitted += 1
    assert (await served.route(RouteHint("unrelated"))) is not first


async def test_a_prompt_the_tokenizer_fails_on_is_routed_by_load() -> None:
    served, engines = two_engines(replace(STICKY, prefix_tokens=1024))

    def refuse(text: str, limit: int) -> list[int]:
        raise RuntimeError("Already borrowed")

    for engine in engines:
        engine.prefix_tokens = refuse  # type: ignore[method-assign]
    signals(engines[0]).board.write(3, 0, 0.1)
    long_prompt = "word " * 2000  # 1,024 tokens' worth: tokenized in a worker thread
    assert (await served.route(RouteHint(long_prompt))).instance.index == 1
    assert (await served.route(RouteHint("short"))).instance.index == 1  # inline
