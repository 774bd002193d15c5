"""experiments.bench.runner: the results schema and the arithmetic of a --quick run.

No timing is asserted: the numbers depend on the machine and its load.
"""

from __future__ import annotations

import json

import pytest

from experiments.bench.core.options import SCHEMA_VERSION, TARGETS


def test_results_file_has_the_schema(quick_results):
    opts, workload, _ = quick_results
    on_disk = json.loads(opts.out.read_text())
    assert on_disk["schema"] == SCHEMA_VERSION
    assert on_disk["complete"] is True
    for key in ("machine", "load_average", "options", "workload", "sections", "targets", "git"):
        assert key in on_disk, key
    assert on_disk["load_average"]["start"] is not None and on_disk["load_average"]["end"]
    assert on_disk["machine"]["cpu_count"] >= 1 and on_disk["machine"]["device"] == "cpu"
    sections = on_disk["sections"]
    measured = ("batched", "dtype", "peers", "roofline", "profile", "tuning", "scaling", "load")
    assert set(measured) <= set(sections)
    # sections that need the real model are skipped with a reason, not crashed
    assert "skipped" in sections["llama"] and "skipped" in sections["e2e"]
    for name in measured:
        assert set(sections[name]["load_average"]) == {"before", "after"}
    b = sections["batched"]
    assert b["batched"]["rows"] == len(workload.rows) == b["per_sample"]["of_samples"]
    assert b["batched"]["repeats"] == opts.repeats == len(b["batched"]["seconds"])
    assert b["per_sample"]["timed_samples"] == opts.per_sample_limit
    assert b["per_sample"]["extrapolated"] is True
    assert {t["key"] for t in on_disk["targets"]} == set(TARGETS)
    assert on_disk["options"]["config"].endswith("phase5.yaml")  # paths as strings


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
    # the report rounds to 3 decimals
    assert d["speedup_other_vs_base"] == pytest.approx(expected, rel=1e-3, abs=5e-4)


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


def test_peers_run_on_the_same_rows(quick_results):
    _, workload, results = quick_results
    pe = results["sections"]["peers"]
    ours, hf = pe["ours"], pe["peers"]["hf_generate_batched"]
    assert ours["rows"] == hf["rows"] == len(workload.rows)
    assert hf["repeats"] == ours["repeats"]  # interleaved with ours, repeat by repeat
    assert hf["ratio_ours_vs_peer"] == pytest.approx(
        ours["tokens_per_second"] / hf["tokens_per_second"], rel=1e-3
    )
    n, total = pe["greedy_agreement_hf_batched"]["identical"].split("/")
    assert n == total
    # llama.cpp needs the GGUF: both of its peers say why they did not run
    assert "skipped" in pe["peers"]["llama.cpp_single_stream"]
    assert "skipped" in pe["peers"]["llama.cpp_multi_sequence"]
    # the other-dtype ratios of section batched are dtypes only, not peers
    keys = [k for k in results["sections"]["batched"] if k.startswith("ratio_batched_")]
    assert keys == ["ratio_batched_vs_per_sample", "ratio_batched_bfloat16_vs_per_sample_float32"]


def test_roofline_and_profile_sections(quick_results):
    _, _, results = quick_results
    ro = results["sections"]["roofline"]
    assert set(ro["runs"]) == {"float32", "bfloat16"}
    for run in ro["runs"].values():
        assert run["flop_total"] > 0 and run["achieved_gflops"] >= 0
    assert ro["machine"]["physical_cores"] >= 1 and "clock_assumption" in ro
    # the products' bound, replayed after our loop in its rounds (ours only)
    assert ro["runs"]["float32"]["products_only"]["seconds"] > 0
    assert "products_only" not in ro["runs"]["bfloat16"]
    assert "in every side-by-side round" in ro["products_only_how"]
    pr = results["sections"]["profile"]
    assert sum(pr["share"].values()) == pytest.approx(1.0, abs=1e-3)
