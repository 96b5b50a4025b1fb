"""The soak: mixed streaming traffic at the rate the host sustains, for a long time, over the
three protocols, with clients that go away mid-stream. Each window reports what the server
kept (resident memory, open files) and how its latency and errors moved."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from bench.burst import percentile, prompt_for
from bench.traffic import PROTOCOLS, Ask, Outcome, Traffic

Note = Callable[[str], None]


@dataclass(frozen=True)
class SoakConfig:
    minutes: float = 30.0
    window_minutes: float = 10.0
    max_tokens: int = 32
    disconnect_every: int = 10
    """Every this-many-th client goes away after its first tokens."""
    load: float = 0.7
    """The share of the measured throughput sent (an open loop below saturation)."""
    calibrate_seconds: float = 60.0
    calibrate_clients: int = 16


@dataclass
class Window:
    """The requests started in one window and the server's footprint at its end."""

    index: int
    outcomes: list[Outcome] = field(default_factory=list)
    rss_mib: float = 0.0
    open_files: int = 0

    def row(self) -> dict[str, float | int | None]:
        done = [o for o in self.outcomes if o.completed]
        latencies = [o.seconds for o in done]
        ttfts = [o.ttft for o in done if o.ttft is not None]
        return {
            "window": self.index + 1,
            "requests": len(self.outcomes),
            "completed": len(done),
            "refused": sum(o.refused for o in self.outcomes),
            "disconnected": sum(o.disconnected for o in self.outcomes),
            "errors": sum(o.failed for o in self.outcomes),
            "latency_p50_s": statistics.median(latencies) if latencies else None,
            "latency_p99_s": percentile(latencies, 0.99),
            "ttft_p99_s": percentile(ttfts, 0.99),
            "rss_mib": round(self.rss_mib, 1),
            "open_files": self.open_files,
        }


def footprint(pid: int) -> tuple[float, int]:
    """Resident memory (MiB) and open files of a process and all of its descendants."""
    rss, files = 0, 0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0, 0
    for process in processes:
        try:
            rss += process.memory_info().rss
            files += process.num_fds()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return rss / 2**20, files


async def calibrate(traffic: Traffic, config: SoakConfig) -> float:
    """Completed requests per second with `calibrate_clients` sending back to back."""
    deadline = time.monotonic() + config.calibrate_seconds
    prompts = itertools.count()

    async def client(offset: int) -> int:
        done = 0
        while time.monotonic() < deadline:
            protocol = PROTOCOLS[(offset + next(prompts)) % len(PROTOCOLS)]
            outcome = await traffic.send(protocol, Ask(prompt_for(protocol), config.max_tokens))
            done += outcome.completed
        return done

    started = time.monotonic()
    completed = sum(await asyncio.gather(*(client(i) for i in range(config.calibrate_clients))))
    return completed / (time.monotonic() - started)


async def soak(
    traffic: Traffic, server_pid: int, config: SoakConfig, note: Note
) -> tuple[float, list[Window]]:
    """Send requests at `config.load` x the calibrated rate for `config.minutes`; return the
    rate and the windows."""
    rate = config.load * await calibrate(traffic, config)
    if rate <= 0:
        raise RuntimeError("the server completed no request while the soak measured its throughput")
    note(
        f"soak: {rate:.2f} requests/s for {config.minutes:g} min "
        f"({config.load:.0%} of the measured throughput)"
    )
    window_seconds = config.window_minutes * 60
    count = max(int(config.minutes * 60 / window_seconds), 1)
    windows = [Window(i) for i in range(count)]
    started = time.monotonic()
    tasks: set[asyncio.Task[None]] = set()

    async def one(window: Window, number: int) -> None:
        protocol = PROTOCOLS[number % len(PROTOCOLS)]
        leave = 2 if number % config.disconnect_every == 0 else None
        ask = Ask(prompt_for(protocol), config.max_tokens, disconnect_after=leave)
        window.outcomes.append(await traffic.send(protocol, ask))

    for window in windows:
        end = started + (window.index + 1) * window_seconds
        number = 0
        while time.monotonic() < end:
            task = asyncio.create_task(one(window, number))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            number += 1
            await asyncio.sleep(1 / rate)
        window.rss_mib, window.open_files = footprint(server_pid)
        row = window.row()
        note(
            f"soak window {row['window']}: {row['requests']} requests, {row['errors']} errors, "
            f"p99 {row['latency_p99_s']} s, RSS {row['rss_mib']} MiB, "
            f"{row['open_files']} open files"
        )
    if tasks:
        await asyncio.wait(tasks, timeout=600)
    return rate, windows


def soak_lines(rate: float, windows: list[Window]) -> list[str]:
    return soak_table(rate, [w.row() for w in windows])


def soak_table(rate: float, rows: list[dict[str, float | int | None]]) -> list[str]:
    """The soak's report from its windows' rows (as `Window.row` gives them, or as recorded)."""
    header = (
        "| window | requests | completed | refused | disconnected | errors "
        "| p50 s | p99 s | TTFT p99 s | RSS MiB | open files |"
    )
    lines = [
        f"soak at {rate:.2f} requests/s, three protocols, one client in ten leaving mid-stream",
        "",
        header,
        "|" + "---|" * 11,
    ]
    lines.extend("| " + " | ".join(fmt(value) for value in row.values()) + " |" for row in rows)
    first, last = rows[0], rows[-1]
    if first["latency_p99_s"] and last["latency_p99_s"]:
        drift = float(last["latency_p99_s"]) / float(first["latency_p99_s"])
        lines.append("")
        lines.append(
            f"p99 drift (last / first window): {drift:.2f}; "
            f"RSS {first['rss_mib']} -> {last['rss_mib']} MiB; "
            f"open files {first['open_files']} -> {last['open_files']}"
        )
    return lines


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)
