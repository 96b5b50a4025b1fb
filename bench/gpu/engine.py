"""The in-process engine target of the GPU run: `AsyncLLM` in a load generator's own process,
kept for every round of a run (one round when targets run one by one)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOADGEN = Path(__file__).resolve().parent / "loadgen.py"


def engine_argv(
    models: Path,
    shape: str,
    raw: Path,
    levels_run: list[tuple[int, int, int]],
    tokens: int,
    engine_args: dict[str, Any],
) -> list[str]:
    levels = ",".join(f"{c}:{r}" for c, r, _ in levels_run)
    return [
        sys.executable,
        str(LOADGEN),
        "--target",
        "engine",
        "--model-path",
        str(models / shape),
        "--levels",
        levels,
        "--tokens",
        str(tokens),
        "--engine-args",
        json.dumps(engine_args),
        "--raw",
        str(raw),
    ]


@dataclass
class EngineSession:
    """The in-process engine kept for a run's rounds: a load generator that
    runs all levels for each tag written to its stdin and leaves the results in a file."""

    process: subprocess.Popen[str]
    raw: Path
    launched: float = field(default_factory=time.time)

    @classmethod
    def start(cls, argv: list[str], raw: Path, log: Path) -> EngineSession:
        with log.open("w") as output:  # the engine writes to its own copy
            process = subprocess.Popen(
                [*argv, "--rounds-from-stdin"],
                stdin=subprocess.PIPE,
                text=True,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        return cls(process, raw)

    def wait_ready(self, timeout: float = 900) -> float:
        """Seconds from the launch until the engine is up (the load generator says so with a
        file)."""
        while not self.raw.with_name(f"{self.raw.name}.ready").exists():
            if self.process.poll() is not None or time.time() - self.launched > timeout:
                raise RuntimeError("the in-process engine did not start")
            time.sleep(0.5)
        return time.time() - self.launched

    def round(self, tag: str, timeout: float = 1800) -> list[dict[str, Any]]:
        """Every level once; [] when the engine has exited or timed out."""
        done = self.raw.with_name(f"{self.raw.name}.{tag}.json")
        if self.process.poll() is not None:
            return []
        stdin = self.process.stdin
        assert stdin is not None  # started with stdin=PIPE
        stdin.write(tag + "\n")
        stdin.flush()
        deadline = time.time() + timeout
        while not done.exists():
            if self.process.poll() is not None or time.time() > deadline:
                return []
            time.sleep(0.5)
        results: list[dict[str, Any]] = json.loads(done.read_text())
        return results

    def stop(self) -> None:
        """End of input: the load generator shuts its engine down; killed after 2 minutes."""
        if self.process.stdin is not None:  # started with stdin=PIPE
            self.process.stdin.close()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
