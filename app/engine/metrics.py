"""The backend's `vllm:` Prometheus metrics (names, labels `model`/`version`, buckets), fed by a
vLLM stat logger registered on each engine, as the Triton vLLM backend does; labelled with the
model's `instance` too ("0" for a model of one instance), and with vLLM's prefix-cache
counters beside them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from vllm.v1.metrics.loggers import PrometheusStatLogger, StatLoggerBase

from app.observability.labels import ENGINE_LABELS as LABELS

TTFT_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0),
)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
LATENCY_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
    *(120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)


def buckets_1_2_5(limit: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to `limit` (vLLM's token-count buckets)."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > limit:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


class VllmMetrics:
    """The metric families, shared by every model; each engine is a (model, version, instance)
    child."""

    def __init__(self, registry: CollectorRegistry, max_model_len: int = 2048) -> None:
        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=registry)

        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.preemptions = counter("vllm:num_preemptions", "Number of preemptions.")
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self._add_histograms(registry, buckets_1_2_5(max_model_len))
        self.running = gauge("vllm:num_requests_running", "Number of requests currently running.")
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_cache_usage = gauge(
            "vllm:gpu_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self._families = [value for value in vars(self).values() if hasattr(value, "labels")]
        self._instances: dict[tuple[str, str], set[str]] = {}
        """(model, version) -> the instances that have series."""

    def _add_histograms(self, registry: CollectorRegistry, token_buckets: tuple[int, ...]) -> None:
        """The latency and size histograms (token counts bucketed up to the context length)."""

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=registry)

        def phase_time(phase: str, name: str) -> Histogram:
            """The time requests spent in one of their phases (vLLM's phase names)."""
            return histogram(
                f"vllm:request_{name}_time_seconds",
                f"Histogram of time spent in {phase} phase for request.",
                LATENCY_BUCKETS,
            )

        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKEN_BUCKETS,
        )
        self.time_to_first_token = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.time_per_output_token = histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            TPOT_BUCKETS,
        )
        self.e2e_latency = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            LATENCY_BUCKETS,
        )
        self.queue_time = phase_time("WAITING", "queue")
        self.inference_time = phase_time("RUNNING", "inference")
        self.prefill_time = phase_time("PREFILL", "prefill")
        self.decode_time = phase_time("DECODE", "decode")
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            token_buckets,
        )
        self.request_params_n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS
        )

    def remove(self, model: str, version: str) -> None:
        """Drop a model's series, every instance's (when it is unloaded), as Triton does."""
        for instance in self._instances.pop((model, version), set()):
            for family in self._families:
                with contextlib.suppress(KeyError):
                    family.remove(model, version, instance)

    def clear_load(self, model: str, version: str, instance: str) -> None:
        """Zero an engine's load gauges when it stops: a dead engine runs nothing."""
        for gauge in (self.running, self.waiting, self.kv_cache_usage):
            gauge.labels(model, version, instance).set(0)

    def stat_logger_factory(
        self, model: str, version: str, instance: str = "0"
    ) -> Callable[[Any, int], StatLoggerBase]:
        """A vLLM `StatLoggerFactory` recording into this engine's series."""
        self._instances.setdefault((model, version), set()).add(instance)

        def factory(vllm_config: Any, engine_index: int = 0) -> StatLoggerBase:
            return ModelStatLogger(self, (model, version, instance))

        return factory


class EngineStepLogger(StatLoggerBase):
    """A vLLM stat logger that reads each engine step's statistics: the scheduler's report
    (`scheduled`) and the iteration's (`iterated`), each where vLLM gives one."""

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if scheduler_stats is not None:
            self.scheduled(scheduler_stats)
        if iteration_stats is not None:
            self.iterated(iteration_stats)

    def scheduled(self, stats: Any) -> None:
        """The scheduler's report: requests running and waiting, KV-cache and prefix-cache use."""

    def iterated(self, stats: Any) -> None:
        """The iteration's statistics: tokens, latencies, finished requests."""

    def log_engine_initialized(self) -> None:
        pass


class ModelStatLogger(EngineStepLogger):
    """Receives vLLM's per-iteration statistics in the engine's event loop."""

    def __init__(self, metrics: VllmMetrics, labels: tuple[str, str, str]) -> None:
        self._prefix_queries = metrics.prefix_cache_queries.labels(*labels)
        self._prefix_hits = metrics.prefix_cache_hits.labels(*labels)
        self._prompt_tokens = metrics.prompt_tokens.labels(*labels)
        self._generation_tokens = metrics.generation_tokens.labels(*labels)
        self._preemptions = metrics.preemptions.labels(*labels)
        self._iteration_tokens = metrics.iteration_tokens.labels(*labels)
        self._ttft = metrics.time_to_first_token.labels(*labels)
        self._tpot = metrics.time_per_output_token.labels(*labels)
        self._e2e = metrics.e2e_latency.labels(*labels)
        self._queue = metrics.queue_time.labels(*labels)
        self._inference = metrics.inference_time.labels(*labels)
        self._prefill = metrics.prefill_time.labels(*labels)
        self._decode = metrics.decode_time.labels(*labels)
        self._request_prompt = metrics.request_prompt_tokens.labels(*labels)
        self._request_generation = metrics.request_generation_tokens.labels(*labels)
        self._n = metrics.request_params_n.labels(*labels)
        self._running = metrics.running.labels(*labels)
        self._waiting = metrics.waiting.labels(*labels)
        self._kv_cache = metrics.kv_cache_usage.labels(*labels)

    def scheduled(self, stats: Any) -> None:
        self._running.set(stats.num_running_reqs)
        self._waiting.set(stats.num_waiting_reqs)
        self._kv_cache.set(stats.kv_cache_usage)
        prefix_cache = stats.prefix_cache_stats
        if prefix_cache is not None:
            self._prefix_queries.inc(prefix_cache.queries)
            self._prefix_hits.inc(prefix_cache.hits)

    def iterated(self, stats: Any) -> None:
        prompt_tokens = stats.num_prompt_tokens
        generation_tokens = stats.num_generation_tokens
        self._prompt_tokens.inc(prompt_tokens)
        self._generation_tokens.inc(generation_tokens)
        self._preemptions.inc(stats.num_preempted_reqs)
        if prompt_tokens or generation_tokens:
            self._iteration_tokens.observe(prompt_tokens + generation_tokens)
        for value in stats.time_to_first_tokens_iter:
            self._ttft.observe(value)
        for value in stats.inter_token_latencies_iter:
            self._tpot.observe(value)
        for value in stats.n_params_iter:
            self._n.observe(value)
        for finished in stats.finished_requests:
            self._e2e.observe(finished.e2e_latency)
            self._queue.observe(finished.queued_time)
            self._inference.observe(finished.inference_time)
            self._prefill.observe(finished.prefill_time)
            self._decode.observe(finished.decode_time)
            self._request_prompt.observe(finished.num_prompt_tokens)
            self._request_generation.observe(finished.num_generation_tokens)


class MetricsProvider:
    """Creates the families on first use, sized by the first engine's context length."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._metrics: VllmMetrics | None = None

    def families(self, max_model_len: int) -> VllmMetrics:
        if self._metrics is None:
            self._metrics = VllmMetrics(self._registry, max_model_len)
        return self._metrics

    def remove(self, model: str, version: str) -> None:
        if self._metrics is not None:
            self._metrics.remove(model, version)

    def clear_load(self, model: str, version: str, instance: str) -> None:
        if self._metrics is not None:
            self._metrics.clear_load(model, version, instance)


class NoVllmPrometheus(PrometheusStatLogger):
    """Stands in for vLLM's own Prometheus logger, which nobody scrapes here (the backend's
    `vllm:` series above are ours) and which would cost CPU at every engine step; with
    several frontend processes its series would also clash with ours. vLLM skips building
    its own when a stat logger of this class is given."""

    def __init__(self, vllm_config: Any, engine_indexes: list[int] | None = None) -> None:
        self.engine_indexes = engine_indexes or [0]

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record_sleep_state(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record_admission_rejection(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log(self) -> None:
        pass

    def log_engine_initialized(self) -> None:
        pass
