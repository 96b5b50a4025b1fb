"""`python -m bench` against the session's real server: target `ours`, one tiny request."""

from __future__ import annotations

import json
from pathlib import Path

from bench.__main__ import main
from tests.support.servers import RunningServer


def test_bench_runs_target_ours_against_a_running_server(
    server: RunningServer, tmp_path: Path
) -> None:
    code = main(
        [
            "--targets",
            "ours",
            "--ours-url",
            server.base_url,
            "-c",
            "1",
            "-r",
            "1",
            "--min-requests",
            "1",
            "-n",
            "4",
            "--out",
            str(tmp_path),
            "--no-plot",
            "--quiet",
        ]
    )
    assert code == 0
    [path] = tmp_path.glob("bench-*.json")
    payload = json.loads(path.read_text())
    [stats] = payload["results"]
    assert stats["target"] == "ours" and stats["concurrency"] == 1
    assert stats["requests"] == 1 and stats["errors"] == 0 and stats["output_tokens"] == 4
    assert stats["tokens_per_s"] > 0 and stats["ttft_ms_p50"] > 0 and stats["itl_ms_p50"] > 0
    assert payload["failures"] == {}
