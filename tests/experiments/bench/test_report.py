"""experiments.bench.reporting.report: the targets and the plain tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.bench.reporting.report import comparisons, evaluate_targets, report_tables

REPO = Path(__file__).resolve().parents[3]


def text_of(tables) -> str:
    return "\n".join(
        "\n".join([t.title, " | ".join(t.columns), *(" | ".join(r) for r in t.rows)])
        for t in tables
    )


def test_tables_cover_the_quick_run(quick_results):
    _, _, results = quick_results
    tables = report_tables(results)
    text = text_of(tables)
    assert "batched vs per-sample" in text
    assert "bfloat16 vs float32" in text
    assert "peers: ours vs HF generate, whole batch, per-row hook" in text
    assert "roofline" in text
    # The sections' details stay in the results the README's notes read from.
    sections = results["sections"]
    assert set(sections["scaling"]) >= {"concepts", "max_new_tokens"}
    assert sections["tuning"]["runs"]
    assert sections["profile"]["share"] and sections["profile"]["decode_steps"] >= 1
    assert sections["roofline"]["runs"]
    main = tables[0]
    assert all(len(row) == len(main.columns) for t in tables for row in t.rows if t is main)
    # a skipped section says why instead of a number
    assert any(row[1] == "skipped" for row in main.rows)
    # the verdict column holds only verdicts (or nothing, for rows without a target)
    assert {row[main.verdict_column] for row in main.rows} <= {"yes", "no", "n/a", ""}


def test_tables_read_a_full_results_file():
    """The committed results (when present) render too: the table code reads every section."""
    path = REPO / "bench/results.json"
    if not path.exists():
        pytest.skip("no committed bench/results.json")
    results = json.loads(path.read_text())
    tables = report_tables(results)
    text = text_of(tables)
    assert "make run" in text
    if "llama" in results["sections"]:  # the steering agreement stays in the results
        assert results["sections"]["llama"]["agreement"]["by_strength"]
    labels = [row[0] for row in tables[0].rows]
    assert labels[0].startswith("(a)")
    # Every section the file holds gets its rows (the committed run need not hold all).
    if "dtype" in results["sections"]:
        assert "    batched bfloat16 vs the same per-sample loop" in labels
    if "roofline" in results["sections"]:
        assert "roofline: decode loop vs the fp32 peak" in labels
    if "peers" in results["sections"]:
        assert "peers: ours vs HF generate, whole batch, per-row hook" in labels
    if "llama" in results["sections"]:
        llama_rows = [row for row in tables[0].rows if row[0].startswith("(b)")]
        assert len(llama_rows) == 2 and llama_rows[1][0].endswith("fp32 GGUF")
        assert llama_rows[1][4] == ">= 4" and llama_rows[0][4] == ""  # the target is fp32's


def test_targets_compare_in_the_right_direction():
    sections = {
        "batched": {"ratio_batched_vs_per_sample": 12.0},
        "peers": {"peers": {"hf_generate_batched": {"ratio_ours_vs_peer": 3.3}}},
        # the target answers the fp32 GGUF; the Q4_K_M ratio is shown beside it
        "llama": {"ratio_ours_vs_llama_cpp": 5.0, "ratio_ours_vs_llama_cpp_f32": 2.0},
        "roofline": {"runs": {"float32": {"fraction_of_peak": 0.37}}},
        "e2e": {
            "median_process_wall_seconds": 90.0,
            "peak_rss_gb": 1.5,
            "stage_groups_seconds": {"perplexity": 15.0, "measurement": 5.1, "tracking": 3.0},
        },
    }
    met = {t["key"]: t["met"] for t in evaluate_targets(sections)}
    assert met == {
        "batched_vs_per_sample": True,
        "ours_vs_hf_batched_hook": True,
        "ours_vs_llama_cpp": False,
        "fraction_of_peak": False,
        "make_run_seconds": False,  # the target is strictly under 90 s
        "perplexity_seconds": True,  # at most 15 s
        "measurement_seconds": False,
        "tracking_seconds": True,
        "peak_memory_gb": True,
        "load_busy_vs_quiet": None,  # no load section measured here
    }
    assert all(t["met"] is None for t in evaluate_targets({}))


def test_the_main_table_shows_every_target_with_its_verdict():
    sections = {
        "peers": {
            "ours": {"tokens_per_second": 100.0},
            "peers": {
                "hf_generate_batched": {"tokens_per_second": 34.0, "ratio_ours_vs_peer": 2.9}
            },
        },
        "roofline": {
            "runs": {
                "float32": {"achieved_gflops": 56.5, "peak_gflops": 166.2, "fraction_of_peak": 0.34}
            }
        },
    }
    results = {"sections": sections, "targets": evaluate_targets(sections)}
    rows = {c.label: c for c in comparisons(results)}
    hook = rows["peers: ours vs HF generate, whole batch, per-row hook"]
    assert (hook.target, hook.met) == (">= 2", "yes")
    roof = rows["roofline: decode loop vs the fp32 peak"]
    assert (roof.ratio, roof.target, roof.met) == ("0.34", ">= 0.5", "no")


def test_the_bf16_make_run_is_shown_beside_the_default_with_its_verdicts():
    def e2e(seconds: float, c3: str) -> dict:
        return {
            "median_process_wall_seconds": seconds,
            "run_phase5_seconds": seconds - 5,
            "peak_rss_gb": 2.5,
            "criteria": {"c3_f1_correlation": {"status": c3, "value": 0.5}},
        }

    sections = {"e2e": {**e2e(104.0, "fail"), "bfloat16": e2e(74.6, "pass")}}
    sections["e2e"]["ratio_default_over_bf16"] = 1.394
    results = {"sections": sections, "targets": evaluate_targets(sections)}
    rows = {c.label: c for c in comparisons(results)}
    default = rows["(c) make run end to end (warm)"]
    assert (default.ours, default.met) == ("104.0 s", "no")  # the target is the default's
    bf16 = rows["(c) the same in bf16 (not the default: other texts)"]
    assert bf16.ours == "74.6 s" and bf16.ratio == "1.39x"
    assert bf16.baseline == "seed c3 pass vs fail" and bf16.met == ""
