"""The likelihood pilot end to end on the tiny Gemma (plumbing), and its statistics."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.likelihood_pilot import format_tables, run_pilot, summarise


def _records(rng, concepts=6, pairs=6):
    out = []
    for c in range(concepts):
        for arm, shift in (("concept", 1.0), ("random:0", 0.0), ("null:neutral:0", 0.2)):
            for s in (-1.0, 1.0):
                for i in range(pairs):
                    e = shift + 0.3 * c / concepts + rng.normal(0, 0.1)
                    out.append({"concept": f"c{c}", "arm": arm, "strength": s, "pair": i, "e": e})
    return out


def test_summary_reports_each_family_its_margin_and_reliability():
    summary, per_concept = summarise(_records(np.random.default_rng(0)), n_boot=300)
    rows = {(r["family"], r["strength"]): r for r in summary}
    assert set(rows) == {(f, s) for f in ("concept", "random", "null:neutral") for s in (-1, 1)}
    concept = rows[("concept", 1.0)]
    assert concept["mean"] == pytest.approx(1.0 + 0.3 * 2.5 / 6, abs=0.05)
    assert concept["low"] < concept["mean"] < concept["high"]
    random = rows[("random", 1.0)]
    assert random["above"] == pytest.approx(1.0, abs=0.05) and random["beats"] == 6
    assert random["above_low"] > 0.8
    # The planted per-concept spread (0.3 x c / 6) is large against the noise: reliable.
    assert concept["reliability"] > 0.8
    assert len(per_concept) == 6 and "null:neutral -1" in per_concept[0]


def test_pilot_runs_on_the_tiny_model(tiny_lm, one_thread, mlflow_store, tmp_path):
    result = run_pilot(
        [f"classifier.dir={tmp_path}", "concepts.limit=3", "criteria.n_boot=200"],
        k_random=1,
        k_neutral=1,
        k_other=1,
        n_texts=4,
        reference_gap=False,
        progress=lambda _msg: None,
        lm=tiny_lm,
    )
    arms = {(r["concept"], r["arm"].split(":")[0]) for r in result.records}
    assert len({c for c, _ in arms}) == 3
    assert {a for _, a in arms} == {"concept", "random", "null"}
    assert len(result.records) == 3 * 4 * 2 * 4  # concepts x directions x signs x pairs
    assert result.n_sequences == 3 * 4 * 2 * 8
    assert all(np.isfinite(r["e"]) for r in result.records)
    table = format_tables(result)
    assert "| concept | +1 |" in table and "null:other" in table and "likelihood" in table
