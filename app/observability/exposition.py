"""The Prometheus text exposition of a registry, with Triton's counters under Triton's own
names: `nv_inference_request_success 3`, not `nv_inference_request_success_total 3` as
`prometheus_client` writes every counter."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from app.observability.triton_metrics import TRITON_COUNTER_FAMILIES

TOTAL = "_total"


class Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def exposition(collector: Collector) -> bytes:
    """Every family of `collector` in the text format (0.0.4)."""
    parts: list[bytes] = []
    others: list[Metric] = []
    for family in collector.collect():
        if family.type == "counter" and family.name in TRITON_COUNTER_FAMILIES:
            if others:
                parts.append(generate_latest(Families(others)))
                others = []
            parts.append(triton_counter(family).encode())
        else:
            others.append(family)
    if others:
        parts.append(generate_latest(Families(others)))
    return b"".join(parts)


def triton_counter(family: Metric) -> str:
    """A counter family as Triton writes it: HELP, TYPE and its samples, named as the family
    (its `_created` samples left out, as Triton has none)."""
    lines = [
        f"# HELP {family.name} {escape_help(family.documentation)}",
        f"# TYPE {family.name} counter",
    ]
    for sample in family.samples:
        if not sample.name.endswith(TOTAL) and sample.name != family.name:
            continue
        labels = ",".join(
            f'{key}="{escape_label(value)}"' for key, value in sorted(sample.labels.items())
        )
        rendered = f"{{{labels}}}" if labels else ""
        lines.append(f"{family.name}{rendered} {floatToGoString(sample.value)}")
    return "\n".join(lines) + "\n"


def escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
