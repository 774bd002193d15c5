"""experiments.bench.core.measure: medians, interleaving and the single-stream chunks."""

from __future__ import annotations

import pytest

from experiments.bench.core.measure import (
    Measurement,
    Stream,
    contiguous_chunks,
    interleaved,
    machine_info,
    measure_side_by_side,
    ratio,
)
from experiments.bench.core.workload import stratified_subset


def test_medians_are_medians():
    m = Measurement(seconds=[3.0, 1.0, 2.0], tokens=[30, 30, 30])
    assert m.median_seconds == 2.0
    assert m.tokens_per_second == 15.0  # median of 10, 30, 15 (not 90 tokens / 6 s)
    even = Measurement(seconds=[1.0, 2.0, 3.0, 4.0], tokens=[4, 4, 4, 4])
    assert even.median_seconds == 2.5
    assert even.tokens_per_second == pytest.approx((4 / 2 + 4 / 3) / 2)
    assert Measurement().tokens_per_second is None
    assert ratio(10.0, 0.0) is None and ratio(None, 1.0) is None


def test_interleaved_alternates_the_runs():
    calls = []

    def run(name):
        def fn(m):
            calls.append(name)
            m = m or Measurement()
            m.add(1.0, 1)
            return m

        return fn

    out = interleaved({"a": run("a"), "b": run("b")}, 3)
    assert calls == ["a", "b"] * 3
    assert len(out["a"].seconds) == len(out["b"].seconds) == 3


def test_single_stream_baselines_run_in_chunks_between_batched_repeats(tiny_lm, synthetic_workload):
    wl = synthetic_workload(tiny_lm, n_concepts=2)
    calls = []

    def batched(m):
        calls.append("batched")
        m = m or Measurement(rows=len(wl.rows))
        m.add(2.0, 100)
        return m

    def stream(rows):
        calls.append(len(rows))
        m = Measurement(rows=len(rows))
        m.add(float(len(rows)), 10 * len(rows))
        return m

    subset = stratified_subset(wl, 7)
    out = measure_side_by_side({"fp32": batched}, {"loop": Stream(subset, stream)}, repeats=3)
    assert calls == ["batched", 2, "batched", 2, "batched", 3]  # 7 samples in 3 chunks
    loop = out["loop"]
    assert loop.rows == 7 and loop.tokens == [20, 20, 30] and loop.tokens_per_second == 10.0
    assert out["fp32"].seconds == [2.0, 2.0, 2.0]
    chunks = contiguous_chunks(subset, 3)
    assert [r.key for c in chunks for r in c] == [r.key for r in subset]


def test_machine_info_names_the_instructions_the_kernels_use(monkeypatch):
    """/proc/cpuinfo lists the CPU's flags; an emulated AVX2-only run restricts torch and
    MKL by environment, and the results must say so."""
    import torch

    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    info = machine_info(torch.device("cpu"))
    assert info["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["isa_env"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert "llama_cpp_system_info" in info  # None where llama-cpp-python is not installed
