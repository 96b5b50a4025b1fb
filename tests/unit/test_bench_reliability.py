"""The reports of `make bench`'s reliability targets from made-up outcomes: the burst's counts
and TTFT percentiles, the soak's rows per window and its drift line."""

from __future__ import annotations

from bench.burst import summarize
from bench.soak import Window, soak_lines
from bench.traffic import Outcome


def outcome(
    protocol: str = "sse",
    *,
    start: float = 0.0,
    ttft: float | None = 0.5,
    seconds: float = 2.0,
    refused: bool = False,
    error: str | None = None,
    disconnected: bool = False,
) -> Outcome:
    done = Outcome(protocol, start=start)
    done.first_token = None if ttft is None else start + ttft
    done.end = start + seconds
    done.refused, done.error, done.disconnected = refused, error, disconnected
    if not (refused or error or disconnected):
        done.finish_reason = "length"
        done.tokens = 16
    return done


def test_the_burst_counts_completed_refused_and_failed_streams() -> None:
    outcomes = [outcome(ttft=t / 10, start=0.0, seconds=3.0) for t in range(1, 11)]
    outcomes += [outcome("grpc", refused=True, ttft=None, seconds=0.1)] * 2
    outcomes += [outcome("openai", error="boom", start=1.0, seconds=9.0)]
    report = summarize(outcomes)
    assert (report.sent, report.completed, report.refused) == (13, 10, 2)
    assert report.failed == ["openai: boom"]
    assert report.ttft_p50 == 0.55 and report.ttft_p99 == 1.0
    assert report.seconds == 10.0
    (summary, failure) = report.lines()
    assert "13 streams" in summary and "10 completed, 2 refused" in summary
    assert "TTFT p50 / p99 0.6 s / 1.0 s" in summary and failure == "  failed: openai: boom"


def test_a_soak_window_reports_its_requests_and_the_servers_footprint() -> None:
    window = Window(0, rss_mib=1234.56, open_files=42)
    window.outcomes = [outcome(seconds=s) for s in (1.0, 2.0, 3.0)]
    window.outcomes += [outcome(disconnected=True), outcome(error="lost")]
    row = window.row()
    assert row == {
        "window": 1,
        "requests": 5,
        "completed": 3,
        "refused": 0,
        "disconnected": 1,
        "errors": 1,
        "latency_p50_s": 2.0,
        "latency_p99_s": 3.0,
        "ttft_p99_s": 0.5,
        "rss_mib": 1234.6,
        "open_files": 42,
    }


def test_the_soak_table_ends_with_the_drift_between_first_and_last_window() -> None:
    first = Window(0, [outcome(seconds=2.0)], rss_mib=1000.0, open_files=40)
    last = Window(1, [outcome(seconds=3.0)], rss_mib=1010.0, open_files=40)
    lines = soak_lines(1.5, [first, last])
    assert lines[0].startswith("soak at 1.50 requests/s")
    assert len(lines) == 4 + 2 + 2 and lines[4].startswith("| 1 | 1 | 1 | 0 | 0 | 0 | 2.00 |")
    assert lines[-1] == "p99 drift (last / first window): 1.50; RSS 1000.0 -> 1010.0 MiB; " + (
        "open files 40 -> 40"
    )
