"""The engine arguments chosen for the CPU where model.json leaves them unset: float32 unless
the CPU computes bfloat16 natively; logged and shown in the config."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from app.engine.cpu_defaults import (
    SEEDED_SAMPLING_WORKER,
    CpuHost,
    cpu_engine_defaults,
    cpu_flags,
)
from app.engine.engine_args import vllm_engine_args
from app.repository.layout import load_repository
from app.triton.model_config import config_json

AVX2_ONLY = frozenset({"fpu", "sse4_2", "avx", "avx2", "fma"})
ZEN4 = AVX2_ONLY | {"avx512f", "avx512_bf16"}
SAPPHIRE_RAPIDS = AVX2_ONLY | {"avx512f", "amx_tile", "amx_bf16"}


def test_without_native_bfloat16_a_cpu_engine_runs_float32() -> None:
    chosen, notes = cpu_engine_defaults({"model": "m"}, CpuHost(AVX2_ONLY))
    assert chosen["dtype"] == "float32"
    assert notes["dtype"].startswith(
        "float32: this CPU has no native bfloat16 (neither AVX512-BF16 nor AMX)"
    )


@pytest.mark.parametrize(("flags", "flag"), [(ZEN4, "avx512_bf16"), (SAPPHIRE_RAPIDS, "amx_bf16")])
def test_with_native_bfloat16_the_models_own_dtype_holds(flags: frozenset[str], flag: str) -> None:
    chosen, notes = cpu_engine_defaults({"model": "m"}, CpuHost(flags))
    assert "dtype" not in chosen
    assert notes["dtype"] == f"auto: this CPU computes bfloat16 natively ({flag})"


@pytest.mark.parametrize("dtype", ["bfloat16", "auto", "float16"])
def test_a_dtype_model_json_pins_is_kept(dtype: str) -> None:
    chosen, notes = cpu_engine_defaults({"model": "m", "dtype": dtype}, CpuHost(AVX2_ONLY))
    assert chosen["dtype"] == dtype and "dtype" not in notes


def test_the_prefill_chunk_is_left_to_vllm() -> None:
    chosen, notes = cpu_engine_defaults({"model": "m"}, CpuHost(AVX2_ONLY))
    assert chosen == {"model": "m", "dtype": "float32", "worker_cls": SEEDED_SAMPLING_WORKER}
    assert set(notes) == {"dtype"}


def test_the_cpu_worker_is_the_one_whose_seeded_sampling_survives_a_split_prompt() -> None:
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.worker.cpu_worker import CPUWorker

    worker = resolve_obj_by_qualname(SEEDED_SAMPLING_WORKER)
    assert issubclass(worker, CPUWorker)
    chosen, _ = cpu_engine_defaults({"model": "m", "worker_cls": "my.Worker"}, CpuHost(ZEN4))
    assert chosen["worker_cls"] == "my.Worker"


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\n"
        "flags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n"
    )
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_the_choice_is_logged_and_shown_in_the_model_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(CpuHost, "this", classmethod(lambda cls: CpuHost(AVX2_ONLY)))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the hub id is not looked up offline
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.json").write_text(json.dumps({"model": "facebook/opt-125m"}))
    with caplog.at_level(logging.INFO, logger="app.engine.cpu_defaults"):
        (spec,) = load_repository(tmp_path, None, vllm_engine_args)
    assert spec.engine_args["dtype"] == "float32" and "__engine_notes__" not in spec.engine_args
    parameters = config_json(spec)["parameters"]
    assert parameters["engine_dtype"]["string_value"].startswith(
        "float32: this CPU has no native bfloat16"
    )
    assert [key for key in parameters if key.startswith("engine_")] == ["engine_dtype"]
    assert (
        "dtype = float32: this CPU has no native bfloat16" in caplog.text
        and "model.json does not set it" in caplog.text
    )


def test_a_client_cannot_write_the_notes_through_model_json(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.json").write_text(
        json.dumps({"model": "x", "__engine_notes__": {"dtype": "x"}})
    )
    with pytest.raises(Exception, match="unknown vLLM engine arguments: '__engine_notes__'"):
        load_repository(tmp_path, None, vllm_engine_args)
