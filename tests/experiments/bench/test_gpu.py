"""Section gpu: its options, report rows, targets and arms on the CPU; the run on a GPU.

The section times Gemma 3 4B's shape with random weights on CUDA; here the parts that do
not need a card are checked: option parsing, the refusal without CUDA, the FLOP count
of the 4B, the rows it generates, each arm on the tiny model, and the report.
"""

from __future__ import annotations

import pytest
import torch

from experiments.bench.core.options import (
    GPU_HF_COMPILED,
    GPU_HF_DYNAMIC,
    GPU_OURS,
    SECTIONS,
    BenchOptions,
    parse_rows,
)
from experiments.bench.gpu.gpu import (
    add_rates,
    flop_per_token,
    gpu_workload,
    ours_decode,
    run_hf,
    run_ours,
    section_gpu,
    time_arm,
)
from experiments.bench.reporting.gpu_report import (
    gpu_table,
    gpu_tables,
    gpu_targets,
    gpu_targets_table,
)
from experiments.bench.runner import gpu_section
from steering.models import ModelSpecError, load_model

pytestmark = pytest.mark.usefixtures("one_thread")


def test_rows_option_and_defaults():
    assert parse_rows("256,1024") == (256, 1024)
    assert parse_rows(" 8 ,") == (8,)
    for bad in ("", "0,8", "a,b", "-4"):
        with pytest.raises(ValueError, match="positive integers"):
            parse_rows(bad)
    opts = BenchOptions()
    assert "gpu" in SECTIONS
    assert (opts.gpu_rows, opts.gpu_tokens, opts.gpu_model) == ((256, 1024), 50, "gemma-3-4b-pt")
    assert BenchOptions.quick_defaults().gpu_rows == (8, 16)


def test_without_cuda_the_section_is_skipped_or_refused():
    cpu = torch.device("cpu")
    results: dict = {"sections": {}, "notes": [], "machine": {}}
    gpu_section(BenchOptions(), cpu, ["batched", "gpu"], results, print)
    assert "needs a CUDA GPU" in results["sections"]["gpu"]["skipped"]
    with pytest.raises(ModelSpecError, match="section gpu needs a CUDA GPU"):
        gpu_section(BenchOptions(), cpu, ["gpu"], results, print)
    with pytest.raises(ModelSpecError, match="needs a CUDA device"):
        section_gpu(BenchOptions(), cpu, print)


def test_a_cpu_bench_skips_the_gpu_section(quick_results):
    _, _, results = quick_results
    assert "needs a CUDA GPU" in results["sections"]["gpu"]["skipped"]
    assert results["complete"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_asking_for_cuda_without_a_gpu_says_so():
    with pytest.raises(ModelSpecError, match="sees no CUDA GPU"):
        load_model("embedded", device="cuda")


def test_the_4b_costs_about_7_8_gflop_per_token():
    lm = load_model("gemma-3-4b-pt", device="meta", dtype="bfloat16", load_format="dummy")
    assert flop_per_token(lm) / 1e9 == pytest.approx(7.76, abs=0.01)


def test_every_row_has_its_own_direction_and_coefficient(tiny_lm):
    wl = gpu_workload(tiny_lm, rows=6, tokens=4)
    assert len(wl.rows) == 6 and wl.directions.shape == (6, tiny_lm.hidden_size)
    assert [r.direction for r in wl.rows] == list(range(6))
    assert torch.allclose(wl.directions.norm(dim=1), torch.ones(6))
    assert len({round(r.coefficient, 6) for r in wl.rows}) == 6
    scale = wl.vectors[0].alpha * wl.vectors[0].beta
    assert all(abs(r.coefficient) <= scale for r in wl.rows)
    assert wl.layer == tiny_lm.default_layer and wl.sampling.top_p == 0.95


def test_the_arms_run_and_are_timed_on_the_tiny_model(tiny_lm):
    wl = gpu_workload(tiny_lm, rows=3, tokens=4)
    cpu = torch.device("cpu")
    arms = {
        GPU_OURS: time_arm(lambda: run_ours(tiny_lm, wl), cpu, repeats=2),
        GPU_HF_DYNAMIC: time_arm(lambda: run_hf(tiny_lm, wl, static=False), cpu, repeats=1),
    }
    assert arms[GPU_OURS]["new_tokens"] <= 3 * 4 and len(arms[GPU_OURS]["seconds"]) == 2
    assert arms[GPU_HF_DYNAMIC]["new_tokens"] == 3 * 4  # HF counts the padded tail too
    assert arms[GPU_OURS]["peak_gib"] is None  # memory is the card's, on CUDA only
    add_rates(arms, flop=1e9, matrix_rate=1e12)
    ours = arms[GPU_OURS]["tokens_per_second"]
    assert arms[GPU_OURS]["fraction_of_matrix_rate"] == pytest.approx(ours * 1e-3, rel=1e-3)
    assert arms[GPU_HF_DYNAMIC]["ours_over_this"] == pytest.approx(
        ours / arms[GPU_HF_DYNAMIC]["tokens_per_second"], rel=1e-2
    )
    assert "ours_over_this" not in arms[GPU_OURS]


def test_the_section_says_what_ours_decodes_with(tiny_lm):
    assert ours_decode(tiny_lm) == {"policy": "cpu"}  # the CUDA policy's kernels on a card


def fake_section(ours_1024_fraction=0.3):
    def arm(rate, first, ratio=None, fraction=None):
        out = {"first_call_seconds": first, "tokens_per_second": rate, "peak_gib": 20.0}
        if ratio is not None:
            out["ours_over_this"] = ratio
        out["fraction_of_matrix_rate"] = fraction
        return out

    return {
        "model": "dummy:gemma-3-4b-pt",
        "dtype": "bfloat16",
        "gpu": "NVIDIA H100 80GB HBM3",
        "bf16_matrix_tflops": 790.0,
        "gflop_per_token": 7.76,
        "tokens": 50,
        "runs": {
            "256": {
                GPU_OURS: arm(10_000.0, 12.0, fraction=0.098),
                GPU_HF_DYNAMIC: arm(3_000.0, 9.0, ratio=3.33),
                GPU_HF_COMPILED: arm(9_000.0, 153.0, ratio=1.11),
            },
            "1024": {
                GPU_OURS: arm(30_000.0, 20.0, fraction=ours_1024_fraction),
                GPU_HF_DYNAMIC: arm(9_500.0, 11.0, ratio=3.16),
                GPU_HF_COMPILED: arm(32_000.0, 151.0, ratio=0.94),
            },
        },
    }


def test_targets_read_the_section():
    targets = {t["key"]: t for t in gpu_targets(fake_section())}
    assert targets["ours_vs_hf_dynamic_256"]["met"] is True
    assert targets["ours_vs_hf_compiled_256"]["met"] is True
    assert targets["ours_vs_hf_compiled_1024"]["met"] is False  # 0.94 < 1.0
    assert targets["ours_first_call_seconds"]["value"] == 20.0
    assert targets["ours_first_call_seconds"]["met"] is True
    assert targets["matrix_rate_fraction_1024"]["met"] is True
    low = {t["key"]: t for t in gpu_targets(fake_section(0.12))}
    assert low["matrix_rate_fraction_1024"]["met"] is False
    empty = gpu_targets({"runs": {}})
    assert all(t["value"] is None and t["met"] is None for t in empty)


def test_report_rows_for_the_section():
    section = fake_section()
    table = gpu_table(section)
    assert len(table.rows) == 6 and all(len(r) == len(table.columns) for r in table.rows)
    first = table.rows[0]
    assert first[0] == "256" and first[1].startswith("ours") and first[-1] == ""
    assert table.rows[2][-1] == "1.11x" and table.rows[2][2] == "153.0"
    assert "790.0 TFLOP/s" in table.title and "7.76 GFLOP" in table.title
    verdicts = [row[3] for row in gpu_targets_table(section).rows]
    assert verdicts == ["yes", "yes", "no", "yes", "yes"]
    results = {"sections": {"gpu": section}, "targets": []}
    titles = [t.title for t in gpu_tables(results)]
    assert titles[0].startswith("gpu: dummy:gemma-3-4b-pt") and titles[1].startswith("gpu: targets")
    assert gpu_tables({"sections": {"gpu": {"skipped": "needs CUDA"}}}) == []


@pytest.mark.cuda
def test_the_section_runs_on_a_gpu(tiny_multimodal_json):
    """A tiny dummy of the 4B class at two batch sizes, every arm (the compiled one too)."""
    opts = BenchOptions(
        gpu_rows=(4, 8), gpu_tokens=12, gpu_model=str(tiny_multimodal_json), gpu_repeats=1
    )
    section = section_gpu(opts, torch.device("cuda"), print)
    for rows in ("4", "8"):
        arms = section["runs"][rows]
        assert set(arms) == {GPU_OURS, GPU_HF_DYNAMIC, GPU_HF_COMPILED}
        assert all(a["tokens_per_second"] > 0 and a["peak_gib"] > 0 for a in arms.values())
    assert section["bf16_matrix_tflops"] > 1
    assert section["ours_decode"] == {
        "policy": "cuda",
        "kernels": {"attention": True, "norms": True, "backend": "inductor"},
    }
    gpu_table(section)
