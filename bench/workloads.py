"""The realistic workloads of `python -m bench.realistic`, as `vllm bench serve` arguments:
lengths that vary, shared prefixes, Poisson arrivals and a chat-shaped dataset made here.

| workload | what |
|---|---|
| `variable` | prompts and outputs of random length (±50 % around the scale's), closed loop |
| `prefix` | a few long system prompts shared by many requests, each with its own question |
| `prefix-many` | (not run by default) `prefix` with more prefixes than one engine's cache holds |
| `poisson` | the `variable` requests arriving as a Poisson process at a fixed rate (open loop) |
| `chat` | conversations (system prompt, earlier turns, a question) for the chat API |
| `fixed` | (not run by default) `variable` with every length at the scale's |

`chat` answers have a long-tailed length; its words are the tokenizer's own (no download).
`fixed` tells the cost of length from the cost of variability.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

WORKLOADS = ("variable", "prefix", "poisson", "chat")
"""The default workloads; `fixed` is there to tell a length effect from a variability one."""
CHAT_SYSTEM_PROMPTS = 4
SEED = 7
ROUND_SEEDS = 1000
"""Round r's client i seeds its prompts with SEED + i + r * ROUND_SEEDS: each round's prompts
are new (a round does not replay prompts the prefix cache still holds)."""


@dataclass(frozen=True)
class Scale:
    """How big each workload is: lengths in tokens, requests, concurrency, arrival rate."""

    input_len: int
    output_len: int
    prompts: int
    concurrency: int
    rate: float
    """Poisson arrivals a second (the `poisson` workload)."""
    prefixes: int
    prefix_len: int
    suffix_len: int
    chat_words: int
    """Words of a chat's system prompt; its turns are a fraction of it."""
    many_prefixes: int = 0
    """The `prefix-many` workload's prefixes (of `prefix_len` tokens)."""


SCALES = {
    # A 2-core CPU runs SmolLM2-135M at some tens of tokens a second in all.
    "cpu": Scale(128, 32, 32, 8, 0.4, 4, 96, 32, 60, 16),
    # The sizes that found the variable-length gap on an H100.
    "gpu": Scale(1024, 256, 1024, 256, 40.0, 8, 1024, 256, 400, 256),
    # The engine stand-in (bench/standin.py) at a GPU's pace, slowed down for a 2-core host.
    "standin": Scale(512, 128, 512, 128, 4.0, 8, 512, 128, 200, 64),
}


@dataclass(frozen=True)
class Workload:
    """One workload for client `index` of `clients`: its `vllm bench serve` arguments."""

    name: str
    chat: bool
    arguments: tuple[str, ...]


def share(total: int | float, clients: int) -> int:
    return max(1, round(total / clients))


def workload(
    name: str,
    scale: Scale,
    index: int,
    clients: int,
    data: Path,
    model: Path,
    round_number: int = 0,
) -> Workload:
    """Client `index` of `clients`' part of workload `name` in round `round_number`: an equal
    share of the prompts, the concurrency or the rate, and a seed of its own (the same for
    every target). The chat dataset is written under `data`, in words of the tokenizer of the
    model folder `model`."""
    seed = SEED + index + round_number * ROUND_SEEDS
    common = ("--seed", str(seed), "--num-prompts", str(share(scale.prompts, clients)))
    closed = ("--max-concurrency", str(share(scale.concurrency, clients)))
    random_lengths = (
        "--dataset-name",
        "random",
        "--random-input-len",
        str(scale.input_len),
        "--random-output-len",
        str(scale.output_len),
        "--random-range-ratio",
        "0" if name == "fixed" else "0.5",
    )
    if name in ("variable", "fixed"):
        return Workload(name, False, (*common, *closed, *random_lengths))
    if name == "poisson":
        rate = f"{scale.rate / clients:g}"
        return Workload(name, False, (*common, "--request-rate", rate, *random_lengths))
    if name in ("prefix", "prefix-many"):
        count = scale.many_prefixes if name == "prefix-many" else scale.prefixes
        prefixes = prefix_arguments(scale, share(count, clients))
        return Workload(name, False, (*common, *closed, *prefixes))
    if name == "chat":
        path = data / f"chat-{index}.jsonl"
        words = tokenizer_words(model / "tokenizer.json")
        write_chats(path, share(scale.prompts, clients), scale, seed, words)
        chats = (
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(path),
            "--custom-output-len",
            "-1",
            "--skip-chat-template",
        )
        return Workload(name, True, (*common, *closed, *chats))
    raise ValueError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")


def prefix_arguments(scale: Scale, prefixes: int) -> tuple[str, ...]:
    """vLLM's `prefix_repetition` dataset: `prefixes` shared prefixes of the scale's length."""
    return (
        "--dataset-name",
        "prefix_repetition",
        "--prefix-repetition-prefix-len",
        str(scale.prefix_len),
        "--prefix-repetition-suffix-len",
        str(scale.suffix_len),
        "--prefix-repetition-num-prefixes",
        str(prefixes),
        "--prefix-repetition-output-len",
        str(scale.output_len),
    )


def tokenizer_words(tokenizer_json: Path) -> list[str]:
    """Whole lowercase words of the tokenizer's vocabulary (a token each, so lengths in words
    are lengths in tokens), in a fixed order."""
    vocab = json.loads(tokenizer_json.read_text())["model"]["vocab"]
    words = {token[1:] for token in vocab if token.startswith("Ġ") and token[1:].isalpha()}
    return sorted(word for word in words if word.islower() and 3 <= len(word) <= 10)


def lognormal(rng: random.Random, median: float, low: int, high: int) -> int:
    """A long-tailed length (as chat turns and answers are), clipped to [low, high]."""
    return min(high, max(low, round(rng.lognormvariate(math.log(median), 0.6))))


def write_chats(path: Path, count: int, scale: Scale, seed: int, words: list[str]) -> None:
    """`count` chat requests in vLLM's custom-dataset JSONL (`prompt`, `output_tokens`): one
    of a few system prompts (the first ones far more often), 0-3 earlier turns and a
    question; answers around the scale's output length with a long tail."""
    rng = random.Random(seed)
    systems_rng = random.Random(SEED)  # the same system prompts for every client
    systems = [
        f"You are assistant number {n}. " + " ".join(systems_rng.choices(words, k=scale.chat_words))
        for n in range(CHAT_SYSTEM_PROMPTS)
    ]
    turn = max(8, scale.chat_words // 4)
    lines = []
    for _ in range(count):
        system = rng.choices(systems, weights=[8, 4, 2, 1][: len(systems)])[0]
        parts = [system]
        for _ in range(rng.randint(0, 3)):
            parts.append(
                "User: " + " ".join(rng.choices(words, k=lognormal(rng, turn, 4, 4 * turn)))
            )
            parts.append(
                "Assistant: " + " ".join(rng.choices(words, k=lognormal(rng, turn, 4, 4 * turn)))
            )
        parts.append("User: " + " ".join(rng.choices(words, k=lognormal(rng, turn, 4, 4 * turn))))
        answer = lognormal(rng, scale.output_len, 4, 4 * scale.output_len)
        lines.append(json.dumps({"prompt": "\n".join(parts), "output_tokens": answer}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
