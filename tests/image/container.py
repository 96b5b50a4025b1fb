"""A container of the image under test, driven through podman's (or docker's) command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


def run(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        command = " ".join(args)
        raise AssertionError(f"{command} -> {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def runs_here(pid: int, program: str) -> bool:
    """Whether process `pid` of this host runs `program` (compared by file name)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, UnicodeDecodeError):
        return False
    return Path(command).name == Path(program).name


@dataclass
class Container:
    tool: str
    name: str

    def inspect(self) -> dict[str, Any]:
        state: dict[str, Any]
        (state,) = json.loads(run(self.tool, "inspect", self.name).stdout)
        return state

    def exec(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(self.tool, "exec", self.name, *command, check=check)

    def logs(self) -> str:
        result = run(self.tool, "logs", self.name, check=False)
        return result.stdout + result.stderr

    def send_signal(self, sig: signal.Signals, state: dict[str, Any]) -> str:
        """Signal the container's first process straight to its host pid (`state` from
        `inspect`; the container tool's `kill` can take seconds on a busy host) where that pid
        runs the container's entry program here and this process may signal it, else through
        the tool (a remote engine's pids are not this host's); which way it went."""
        pid = int(state["State"]["Pid"])
        if runs_here(pid, str(state["Path"])):
            try:
                os.kill(pid, sig)
            except PermissionError:
                pass
            else:
                return f"to host pid {pid}"
        run(self.tool, "kill", "--signal", sig.name, self.name)
        return f"by {self.tool} kill"

    def is_running(self) -> bool:
        return bool(self.inspect()["State"]["Running"])

    def wait_ready(self, base_url: str, timeout: float) -> float:
        """Seconds until /v2/health/ready answers 200; fails with the logs if the container
        stops or the time runs out."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if not self.is_running():
                raise AssertionError(f"{self.name} stopped while starting:\n{self.logs()[-6000:]}")
            try:
                if httpx.get(f"{base_url}/v2/health/ready", timeout=5).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(2)
        raise AssertionError(f"{self.name} not ready in {timeout:.0f} s:\n{self.logs()[-6000:]}")

    def remove(self) -> None:
        run(self.tool, "rm", "-f", "-v", self.name, check=False)
