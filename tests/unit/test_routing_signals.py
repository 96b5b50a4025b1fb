"""What routing between instances reads of each engine: its load reports on a board (shared
between frontend processes through a mapped file), the requests sent since the last report,
and the index of its KV cache kept from its KV-cache events (stored, removed, cleared; bounded
by the engine's block count; only the leading blocks routing looks at; the blocks a routed
request will store counted meanwhile)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from app.core.kv_index import EXPECTED_SECONDS, KvBlockIndex, prompt_keys
from app.core.load_view import EngineLoad, EngineSignals, LoadBoard, PendingCount, signals_of

BLOCK = 4


def store_chain(
    index: KvBlockIndex, tokens: list[int], start: int = 0, parent: int | None = None
) -> list[int]:
    """Store `tokens` as whole blocks after `parent`, the engine's hashes numbered from `start`
    (as vLLM publishes a request's new blocks); their hashes."""
    hashes = [start + n for n in range(len(tokens) // BLOCK)]
    index.stored(parent, hashes, tokens, BLOCK)
    return hashes


def test_a_board_holds_the_latest_report_and_counts_them() -> None:
    board = LoadBoard()
    assert board.read() is None
    board.write(3, 2, 0.25)
    board.write(4, 1, 0.5)
    assert board.read() == EngineLoad(running=4, waiting=1, kv_usage=0.5, serial=2)
    board.write(-1, 0, 7.0)  # out of range values are clamped
    assert board.read() == EngineLoad(running=0, waiting=0, kv_usage=1.0, serial=3)


def write_report(path: str) -> None:
    board = LoadBoard.open_file(Path(path))
    board.write(7, 5, 0.75)
    board.close()


def test_a_board_file_is_shared_between_processes(tmp_path: Path) -> None:
    path = tmp_path / "load"
    LoadBoard.create_file(path)
    reader = LoadBoard.open_file(path)
    assert reader.read() is None
    process = multiprocessing.get_context("spawn").Process(target=write_report, args=(str(path),))
    process.start()
    process.join(timeout=120)
    assert process.exitcode == 0
    assert reader.read() == EngineLoad(7, 5, 0.75, 1)
    reader.close()


def test_requests_sent_since_a_report_start_over_with_a_newer_one() -> None:
    board, pending = LoadBoard(), PendingCount()
    assert pending.since(board.read()) == 0
    pending.count += 2
    assert pending.since(board.read()) == 2  # no report yet: still counting
    board.write(2, 0, 0.1)
    assert pending.since(board.read()) == 0
    pending.count += 1
    assert pending.since(board.read()) == 1
    board.write(3, 0, 0.1)
    assert pending.since(board.read()) == 0


def test_signals_are_read_from_an_engine_that_has_them() -> None:
    class Engine:
        routing_signals = EngineSignals(LoadBoard(), None, 2)

    assert signals_of(Engine()) is Engine.routing_signals
    assert signals_of(object()) is None


def test_stored_blocks_match_a_prompt_from_its_first_block_on() -> None:
    index = KvBlockIndex(capacity=100, depth=8)
    assert index.block_size == 0
    prompt = list(range(100, 120))  # 5 blocks
    hashes = store_chain(index, prompt[:12])  # 3 blocks
    assert index.block_size == BLOCK and len(index) == 3
    assert index.match(prompt_keys(prompt, BLOCK, None, 8)) == 3
    assert index.match(prompt_keys(prompt[:7], BLOCK, None, 8)) == 1  # one whole block
    assert index.match(prompt_keys([9, *prompt], BLOCK, None, 8)) == 0  # shifted: no match
    store_chain(index, prompt[12:20], start=50, parent=hashes[-1])  # the request's next blocks
    assert index.match(prompt_keys(prompt, BLOCK, None, 8)) == 5
    assert index.match(prompt_keys(prompt, BLOCK, None, 2)) == 2  # routing looks at 2 blocks


def test_a_block_after_an_unknown_parent_is_not_kept() -> None:
    index = KvBlockIndex(capacity=100, depth=8)
    store_chain(index, list(range(8)), parent=12345)
    assert len(index) == 0


def test_removed_blocks_no_longer_match_and_copies_count() -> None:
    index = KvBlockIndex(capacity=100, depth=8)
    prompt = list(range(16))
    hashes = store_chain(index, prompt)
    index.stored(None, [hashes[0]], prompt[:BLOCK], BLOCK)  # a second copy of the first block
    index.removed([hashes[0]])
    assert index.match(prompt_keys(prompt, BLOCK, None, 8)) == 4
    index.removed([hashes[0], 999])  # the last copy, and one never stored
    assert index.match(prompt_keys(prompt, BLOCK, None, 8)) == 0
    assert len(index) == 3
    index.cleared()
    assert len(index) == 0 and index.match(prompt_keys(prompt, BLOCK, None, 8)) == 0


def test_only_the_leading_blocks_are_kept() -> None:
    index = KvBlockIndex(capacity=100, depth=2)
    hashes = store_chain(index, list(range(16)))
    assert len(index) == 2
    store_chain(index, list(range(16, 24)), start=10, parent=hashes[-1])  # deeper: skipped
    assert len(index) == 2


def test_the_index_never_holds_more_than_the_engines_block_count() -> None:
    index = KvBlockIndex(capacity=5, depth=4)
    for sequence in range(10):
        store_chain(index, [sequence * 1000 + n for n in range(8)], start=sequence * 10)
    assert len(index) == 5
    newest = [9000 + n for n in range(8)]
    oldest = list(range(8))
    assert index.match(prompt_keys(newest, BLOCK, None, 4)) == 2
    assert index.match(prompt_keys(oldest, BLOCK, None, 4)) == 0


def test_an_adapters_blocks_match_only_its_own_requests() -> None:
    index = KvBlockIndex(capacity=100, depth=8)
    prompt = list(range(8))
    index.stored(None, [1, 2], prompt, BLOCK, [["sql"], ["sql"]])  # msgpack's lists
    assert index.match(prompt_keys(prompt, BLOCK, "sql", 8)) == 2
    assert index.match(prompt_keys(prompt, BLOCK, None, 8)) == 0
    assert index.match(prompt_keys(prompt, BLOCK, "chat", 8)) == 0
    index.stored(None, [3], prompt[:BLOCK], BLOCK, [None])
    assert index.match(prompt_keys(prompt, BLOCK, None, 8)) == 1


def test_blocks_expected_from_a_routed_request_match_until_stored_or_expired() -> None:
    index = KvBlockIndex(capacity=100, depth=8)
    prompt = list(range(12))
    keys = prompt_keys(prompt, BLOCK, None, 8)
    index.expect(keys[:2], now=100.0)
    assert index.match(keys, now=101.0) == 2
    assert index.match(keys, now=100.0 + EXPECTED_SECONDS + 1) == 0  # never stored: expired
    store_chain(index, prompt)  # the engine's events: held for as long as it keeps them
    assert index.match(keys, now=100.0 + EXPECTED_SECONDS + 1) == 3
    index.cleared()
    index.expect(keys, now=0.0)
    assert index.match(keys, now=1.0) == 3
    index.cleared()
    assert index.match(keys, now=1.0) == 0


def test_expected_blocks_are_bounded_by_the_engines_block_count() -> None:
    index = KvBlockIndex(capacity=4, depth=8)
    first, later = [1, 2, 3], [4, 5, 6]
    index.expect(first, now=0.0)
    index.expect(later, now=0.0)
    assert index.match(later, now=1.0) == 3
    assert index.match(first, now=1.0) == 0  # its first two pushed out


def test_an_engines_published_batches_keep_its_index() -> None:
    """vLLM's own events, through msgpack as its publisher sends them."""
    import msgspec
    from vllm.distributed.kv_events import (
        AllBlocksCleared,
        BlockRemoved,
        BlockStored,
        KVEventBatch,
    )

    from app.engine.kv_events import apply_batch

    def sent(*events: BlockStored | BlockRemoved | AllBlocksCleared) -> KVEventBatch:
        batch = KVEventBatch(ts=0.0, events=list(events))
        decoded: KVEventBatch = msgspec.msgpack.decode(
            msgspec.msgpack.encode(batch), type=KVEventBatch
        )
        return decoded

    index = KvBlockIndex(capacity=100, depth=8)
    prompt = list(range(12))
    stored = BlockStored(
        block_hashes=[11, 12, 13],
        parent_block_hash=None,
        token_ids=prompt,
        block_size=BLOCK,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )
    offloaded = BlockStored(
        block_hashes=[21],
        parent_block_hash=None,
        token_ids=[7, 7, 7, 7],
        block_size=BLOCK,
        lora_id=None,
        medium="CPU",
        lora_name=None,
    )
    apply_batch(index, sent(stored, offloaded))
    assert index.match(prompt_keys(prompt, BLOCK, None, 8)) == 3
    assert index.match(prompt_keys([7, 7, 7, 7], BLOCK, None, 8)) == 0  # an offload tier's
    apply_batch(index, sent(BlockRemoved(block_hashes=[13], medium="GPU")))
    assert index.match(prompt_keys(prompt, BLOCK, None, 8)) == 2
    apply_batch(index, sent(AllBlocksCleared()))
    assert len(index) == 0
