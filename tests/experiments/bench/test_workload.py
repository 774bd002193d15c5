"""experiments.bench.core.workload: the stratified subset and the scaled grid."""

from __future__ import annotations

from experiments.bench.core.workload import scaled_workload, stratified_subset


def test_stratified_subset_spreads_over_strengths(tiny_lm, synthetic_workload):
    wl = synthetic_workload(tiny_lm, n_concepts=3)
    subset = stratified_subset(wl, 6)
    assert len(subset) == len({r.key for r in subset}) == 6
    counts = {}
    for r in subset:
        counts[wl.strengths[r.key]] = counts.get(wl.strengths[r.key], 0) + 1
    assert counts == {-1.0: 2, 0.0: 2, 1.0: 2}
    assert [r.key for r in stratified_subset(wl, 6)] == [r.key for r in subset]
    assert len(stratified_subset(wl, 1000)) == len(wl.rows)


def test_scaled_workload_repeats_concepts_with_new_seeds(tiny_lm, synthetic_workload):
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
