"""experiments.bench: the results schema, the arithmetic and the table, on the tiny model.

No timing is asserted: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import typer
from rich.console import Console

from experiments import bench
from experiments.bench import (
    BenchOptions,
    Measurement,
    compare_deltas,
    evaluate_targets,
    interleaved,
    llama_layer_index,
    render_tables,
    run_bench,
    scaled_workload,
    stratified_subset,
    synthetic_workload,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_results(tiny_lm, tmp_path_factory):
    """A --quick run of every section that applies to synthetic rows on the tiny model."""
    tmp = tmp_path_factory.mktemp("bench")
    opts = BenchOptions.quick_defaults(
        config=REPO / "configs/phase5.yaml",
        out=tmp / "results.json",
        work_dir=tmp,
        threads=1,  # two threads on a loaded 2-core machine can spin for seconds
        tuning_threads=(1,),
    )
    workload = synthetic_workload(tiny_lm, n_concepts=2, max_new_tokens=6)
    results = run_bench(opts, lm=tiny_lm, workload=workload)
    return opts, workload, results


def test_results_file_has_the_schema(quick_results):
    opts, workload, _ = quick_results
    on_disk = json.loads(opts.out.read_text())
    assert on_disk["schema"] == bench.SCHEMA_VERSION
    assert on_disk["complete"] is True
    for key in ("machine", "load_average", "options", "workload", "sections", "targets", "git"):
        assert key in on_disk, key
    assert on_disk["load_average"]["start"] is not None and on_disk["load_average"]["end"]
    assert on_disk["machine"]["cpu_count"] >= 1 and on_disk["machine"]["device"] == "cpu"
    sections = on_disk["sections"]
    assert {"batched", "dtype", "tuning", "scaling"} <= set(sections)
    # sections that need the real model are skipped with a reason, not crashed
    assert "skipped" in sections["llama"] and "skipped" in sections["e2e"]
    for name in ("batched", "dtype", "tuning", "scaling"):
        assert set(sections[name]["load_average"]) == {"before", "after"}
    b = sections["batched"]
    assert b["batched"]["rows"] == len(workload.rows) == b["per_sample"]["of_samples"]
    assert b["batched"]["repeats"] == opts.repeats == len(b["batched"]["seconds"])
    assert b["per_sample"]["timed_samples"] == opts.per_sample_limit
    assert b["per_sample"]["extrapolated"] is True
    assert {t["key"] for t in on_disk["targets"]} == set(bench.TARGETS)


def test_ratio_is_batched_over_per_sample_tokens_per_second(quick_results):
    _, _, results = quick_results
    b = results["sections"]["batched"]
    for part in ("batched", "per_sample", "ours_one_row_at_a_time"):
        m = b[part]
        rates = [t / s for t, s in zip(m["tokens"], m["seconds"], strict=True)]
        assert m["tokens_per_second"] == pytest.approx(sorted(rates)[len(rates) // 2], rel=1e-3)
    expected = b["batched"]["tokens_per_second"] / b["per_sample"]["tokens_per_second"]
    assert b["ratio_batched_vs_per_sample"] == pytest.approx(expected, rel=1e-3)
    targets = {t["key"]: t for t in results["targets"]}
    assert targets["batched_vs_per_sample"]["value"] == b["ratio_batched_vs_per_sample"]
    assert targets["batched_vs_per_sample"]["met"] == (b["ratio_batched_vs_per_sample"] >= 10)
    assert targets["make_run_seconds"]["met"] is None  # not measured here


def test_dtype_section_compares_the_same_rows(quick_results):
    _, workload, results = quick_results
    d = results["sections"]["dtype"]
    assert (d["base"], d["other"]) == ("float32", "bfloat16")
    gen = d["generation"]
    assert gen["float32"]["rows"] == gen["bfloat16"]["rows"] == len(workload.rows)
    expected = gen["bfloat16"]["tokens_per_second"] / gen["float32"]["tokens_per_second"]
    assert d["speedup_other_vs_base"] == pytest.approx(expected, rel=1e-3)


def test_scaling_and_tuning_cover_the_requested_points(quick_results):
    opts, workload, results = quick_results
    sc = results["sections"]["scaling"]
    assert list(sc["concepts"]) == [str(n) for n in opts.scaling_concepts]
    assert list(sc["max_new_tokens"]) == [str(n) for n in opts.scaling_tokens]
    per_concept = len(workload.rows) // workload.n_concepts
    for n, v in sc["concepts"].items():
        assert v["rows"] == int(n) * per_concept
    assert sc["concepts"]["2"]["reused_batched"] is True  # the (a) measurement itself
    tu = results["sections"]["tuning"]
    assert "threads=1" in tu["runs"] and tu["best"] in tu["runs"]


def test_tables_render(quick_results):
    _, _, results = quick_results
    console = Console(record=True, width=200)
    for table in render_tables(results):
        console.print(table)
    text = console.export_text()
    assert "batched vs per-sample" in text
    assert "bfloat16 vs float32" in text and "(e) scaling" in text and "tuning" in text


def test_tables_render_a_full_results_file():
    """The committed results (when present) render too: the table code reads every section."""
    path = REPO / "bench/results.json"
    if not path.exists():
        pytest.skip("no committed bench/results.json")
    console = Console(record=True, width=200)
    for table in render_tables(json.loads(path.read_text())):
        console.print(table)
    assert "make run" in console.export_text()


def test_medians_are_medians():
    m = Measurement(seconds=[3.0, 1.0, 2.0], tokens=[30, 30, 30])
    assert m.median_seconds == 2.0
    assert m.tokens_per_second == 15.0  # median of 10, 30, 15 (not 90 tokens / 6 s)
    even = Measurement(seconds=[1.0, 2.0, 3.0, 4.0], tokens=[4, 4, 4, 4])
    assert even.median_seconds == 2.5
    assert even.tokens_per_second == pytest.approx((4 / 2 + 4 / 3) / 2)
    assert Measurement().tokens_per_second is None
    assert bench.ratio(10.0, 0.0) is None and bench.ratio(None, 1.0) is None


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


def test_single_stream_baselines_run_in_chunks_between_batched_repeats(tiny_lm):
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
    out = bench.measure_side_by_side(
        {"fp32": batched}, {"loop": bench.Stream(subset, stream)}, repeats=3
    )
    assert calls == ["batched", 2, "batched", 2, "batched", 3]  # 7 samples in 3 chunks
    loop = out["loop"]
    assert loop.rows == 7 and loop.tokens == [20, 20, 30] and loop.tokens_per_second == 10.0
    assert out["fp32"].seconds == [2.0, 2.0, 2.0]
    chunks = bench.contiguous_chunks(subset, 3)
    assert [r.key for c in chunks for r in c] == [r.key for r in subset]


def test_stratified_subset_spreads_over_strengths(tiny_lm):
    wl = synthetic_workload(tiny_lm, n_concepts=3)
    subset = stratified_subset(wl, 6)
    assert len(subset) == len({r.key for r in subset}) == 6
    counts = {}
    for r in subset:
        counts[wl.strengths[r.key]] = counts.get(wl.strengths[r.key], 0) + 1
    assert counts == {-1.0: 2, 0.0: 2, 1.0: 2}
    assert [r.key for r in stratified_subset(wl, 6)] == [r.key for r in subset]
    assert len(stratified_subset(wl, 1000)) == len(wl.rows)


def test_scaled_workload_repeats_concepts_with_new_seeds(tiny_lm):
    wl = synthetic_workload(tiny_lm, n_concepts=2)
    per_concept = len(wl.rows) // 2
    one, how = scaled_workload(wl, 1)
    assert len(one.rows) == per_concept and "first 1" in how
    five, how = scaled_workload(wl, 5)
    assert len(five.rows) == 5 * per_concept and "distinct seeds" in how
    assert len({r.key for r in five.rows}) == len(five.rows)
    assert set(five.strengths) == {r.key for r in five.rows}
    # each copy keeps common random numbers across strengths, with its own seed
    seeds: dict[str, set[int]] = {}
    for r in five.rows:
        cell = "|".join(part for part in r.key.split("|") if not part.startswith("s"))
        seeds.setdefault(cell, set()).add(r.seed)
    assert len(seeds) == 5 * per_concept // 3 and all(len(s) == 1 for s in seeds.values())
    assert len({r.seed for r in five.rows}) > len({r.seed for r in wl.rows})


def test_compare_deltas_is_paired_by_row():
    def rows(deltas):
        out = {}
        for i, (s, d) in enumerate(deltas):
            out[f"c|p{i % 2}|n0|s{s:+.3f}"] = {"delta": d, "strength": s}
        return out

    base = rows([(0.0, 0.1), (0.0, 0.2), (1.0, 0.3), (1.0, 0.5)])
    other = rows([(0.0, 0.1), (0.0, 0.2), (1.0, 0.4), (1.0, 0.4)])
    per = compare_deltas(base, other)
    assert per["+0"]["mean_difference"] == 0.0 and per["+0"]["within_2se"] is True
    assert per["+1"]["n"] == 2
    assert per["+1"]["mean_delta_base"] == pytest.approx(0.4)
    assert per["+1"]["mean_difference"] == pytest.approx(0.0)
    assert per["+1"]["se_difference"] == pytest.approx(0.1)  # stdev(+0.1, -0.1) / sqrt(2)
    assert per["+1"]["mean_shift_base"] == pytest.approx(0.25)  # (0.3-0.1 + 0.5-0.2) / 2
    assert per["+1"]["mean_shift_other"] == pytest.approx(0.25)  # (0.4-0.1 + 0.4-0.2) / 2
    assert per["+1"]["mean_shift_difference"] == pytest.approx(0.0)
    assert per["+1"]["se_shift_difference"] == pytest.approx(0.1)
    assert per["+1"]["shift_within_2se"] is True and "mean_shift_base" not in per["+0"]


def test_targets_compare_in_the_right_direction():
    sections = {
        "batched": {"ratio_batched_vs_per_sample": 12.0},
        "llama": {"ratio_ours_vs_llama_cpp": 2.0},
        "e2e": {"median_process_wall_seconds": 180.0, "peak_rss_gb": 1.5},
    }
    met = {t["key"]: t["met"] for t in evaluate_targets(sections)}
    assert met == {
        "batched_vs_per_sample": True,
        "ours_vs_llama_cpp": False,
        "make_run_seconds": False,  # the target is strictly under 3 minutes
        "peak_memory_gb": True,
    }
    assert all(t["met"] is None for t in evaluate_targets({}))


def test_llama_layer_mapping():
    assert llama_layer_index(9) == 9
    with pytest.raises(ValueError, match="layer 0"):
        llama_layer_index(0)


def test_sections_option():
    assert bench._parse_sections(None, None) == bench.SECTIONS
    assert bench._parse_sections("llama,batched", None) == ("batched", "llama")
    assert "e2e" not in bench._parse_sections(None, "e2e")
    with pytest.raises(typer.BadParameter, match="unknown bench section"):
        bench._parse_sections("batched,speed", None)


def test_peak_memory_per_phase():
    memory = bench.PeakMemory()
    memory.enter("allocate")
    block = torch.ones(8 * 1024 * 1024)  # 32 MB, touched
    memory.enter("after")
    peak, phases = memory.finish()
    del block
    assert set(phases) == {"start (interpreter, imports, config)", "allocate", "after"}
    assert peak == max(phases.values()) > 32e6


def test_cli_has_a_bench_command():
    from typer.testing import CliRunner

    from experiments.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["bench", "--help"])
    assert result.exit_code == 0 and "--per-sample-limit" in result.output
    bad = runner.invoke(app, ["bench", "--only", "speed"])
    assert bad.exit_code == 2
