"""Stratified sampling: balanced over cells and both margins, seeded."""

from __future__ import annotations

from experiments.validation.human.sample import stratified_sample
from experiments.validation.runs import ScoredGeneration


def generation(key: str, concept: str, strength: float, prompt_index: int) -> ScoredGeneration:
    return ScoredGeneration(
        key=key, concept=concept, concept_name=concept, strength=strength, delta=0.0,
        text="", prompt="", prompt_index=prompt_index,
    )  # fmt: skip


def test_stratified_sample_is_balanced_and_seeded():
    records = [
        generation(f"c{c}|p{p}|s{s}", f"c{c}", s, p)
        for c in range(10)
        for s in (-1.0, 0.0, 1.0)
        for p in range(3)
    ]
    for n, per_concept in ((50, {5}), (20, {2})):
        chosen = stratified_sample(records, n, seed=7)
        assert len(chosen) == n and len({r.key for r in chosen}) == n
        cells = {(c, s): 0 for c in range(10) for s in (-1.0, 0.0, 1.0)}
        for r in chosen:
            cells[(int(r.concept[1:]), r.strength)] += 1
        assert max(cells.values()) - min(cells.values()) <= 1
        concepts = {f"c{c}": sum(r.concept == f"c{c}" for r in chosen) for c in range(10)}
        assert set(concepts.values()) == per_concept
        strengths = [sum(r.strength == s for r in chosen) for s in (-1.0, 0.0, 1.0)]
        assert max(strengths) - min(strengths) <= 1
    assert stratified_sample(records, 50, 7) == stratified_sample(records, 50, 7)
    assert stratified_sample(records, 50, 7) != stratified_sample(records, 50, 8)
    # A thin cell is used up and the rest is spread over the others.
    thin = [r for r in records if not (r.concept == "c0" and r.strength == 1.0)]
    thin.append(generation("c0|only", "c0", 1.0, 0))
    assert any(r.key == "c0|only" for r in stratified_sample(thin, 60, 1))
    assert len(stratified_sample(thin, 500, 1)) == len(thin)
