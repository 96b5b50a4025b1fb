"""The fuzz tier: hostile and well-typed edge inputs on every protocol, counted per route.

`FUZZ_EXAMPLES` (default 1000) is the number of inputs per route; CI runs the default, a
longer run sets more (`make test FUZZ_EXAMPLES=20000`, or `FUZZ_EXAMPLES=20000 pytest
tests/fuzz`). The counts (inputs, statuses, slowest answer) are printed at the end of the
run and written to tests/artifacts/fuzz-report.json (fuzz-report-<part>.json for each of
`make test`'s side-by-side pytest processes)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.fuzz.report import REPORT, REPORT_PATH


@pytest.fixture(scope="session")
def fuzz_report() -> Iterator[None]:
    yield
    REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
    REPORT_PATH.write_text(json.dumps(REPORT.as_json(), indent=2))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT.routes:
        terminalreporter.write_sep("=", "fuzz tier: inputs per route")
        for line in REPORT.lines():
            terminalreporter.write_line(line)
