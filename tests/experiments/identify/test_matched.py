"""The dose held by design (identify/stages/matched.py): the bisection finds each direction's
KL-matched multiplier, flags a target it cannot reach, and the subset spreads over
v*'s AUROC strata; the dose's prompts split (seeded, disjoint) so it is bisected on one
half and verified on the other."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.identify.stages.matched import (
    MATCH_TOLERANCE,
    bisect_dose,
    first_guess,
    match_dose,
    matched,
    matching_split,
    stratified_subset,
)
from experiments.rundir import read_jsonl


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    a=st.lists(st.floats(0.01, 10.0), min_size=1, max_size=8),
    power=st.floats(1.0, 3.0),
    target=st.floats(0.01, 5.0),
)
def test_the_bisection_matches_any_monotone_kl_inside_its_bracket(a, power, target):
    a = np.array(a)
    calls = []

    def kl_at(k):
        calls.append(1)
        return a * k**power  # one call per step for every direction at once

    guess = first_guess(a, target)  # √(target/KL(1)): exact for power 2
    true = (target / a) ** (1 / power)
    ratio = true / guess
    inside = (ratio >= 1 / 3.9) & (ratio <= 3.9)  # clear of the bracket's edges
    outside = (ratio < 1 / 4.5) | (ratio > 4.5)  # KL at the edge > 10% off the target
    k, achieved = bisect_dose(kl_at, target, guess)
    assert len(calls) == 9  # 8 steps and the achieved KL
    np.testing.assert_allclose(k[inside], true[inside], rtol=0.01)
    assert matched(achieved, target)[inside].all()
    assert not matched(achieved, target)[outside].any()


def test_a_target_the_direction_cannot_reach_is_flagged_not_matched():
    def kl_at(k):
        return np.minimum(0.1 * k**2, 0.2)  # saturates below the target

    k, achieved = bisect_dose(kl_at, 1.0, np.array([1.0]))
    assert not matched(achieved, 1.0)[0]
    assert k[0] > 3.9  # it ran to the bracket's top


def test_the_subset_takes_concepts_from_every_stratum_and_is_seeded():
    values = {f"c{i:02d}": i / 30 for i in range(30)}
    subset = stratified_subset(values, 6, seed=0)
    assert len(subset) == 6 and subset == sorted(subset)
    strata = [int(values[c] * 30) // 10 for c in subset]
    assert sorted(strata) == [0, 0, 1, 1, 2, 2]
    assert stratified_subset(values, 6, seed=0) == subset
    assert stratified_subset(values, 6, seed=1) != subset
    assert stratified_subset(values, 40, seed=0) == sorted(values)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(n=st.integers(2, 40), seed=st.integers(0, 1000))
def test_the_prompt_split_is_disjoint_covering_and_seeded(n, seed):
    matching, verifying = matching_split(n, seed)
    assert not set(matching) & set(verifying)
    assert sorted([*matching, *verifying]) == list(range(n))
    assert len(matching) == (n + 1) // 2 and verifying  # both halves used
    assert matching_split(n, seed) == (matching, verifying)


def test_other_seeds_split_otherwise_and_one_prompt_cannot_be_split():
    splits = {tuple(matching_split(8, seed)[0]) for seed in range(10)}
    assert len(splits) > 1
    with pytest.raises(ValueError, match="at least 2"):
        matching_split(1, 0)


class PromptKL:
    """A deterministic KL: direction d at multiplier k on prompt q gives a[d, q]·k², and
    remembers the prompts of every call."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.calls: list[list[int]] = []

    def __call__(self, k: np.ndarray, prompts) -> np.ndarray:
        self.calls.append(list(prompts))
        return self.a[:, list(prompts)] * np.asarray(k)[:, None] ** 2


def test_the_dose_is_bisected_on_one_half_and_verified_on_the_other():
    # 3 directions × 4 prompts; v* (row 0) is even; direction 1 moves prompts 0 and 2 twice
    # as much as 1 and 3; direction 2 is even, four times v*
    a = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 0.5, 1.0, 0.5], [4.0, 4.0, 4.0, 4.0]])
    kl = PromptKL(a)
    dose = match_dose(kl, 3, 0, [0, 2], [1, 3])
    # the target and k = 1 on every prompt in one call, then the bisection on [0, 2] only,
    # then the verification on [1, 3] only
    assert kl.calls[0] == [0, 2, 1, 3]
    assert all(c == [0, 2] for c in kl.calls[1:-1]) and kl.calls[-1] == [1, 3]
    assert dose.target == pytest.approx(1.0)
    np.testing.assert_allclose(dose.multiplier, [1.0, 1.0, 0.5], rtol=0.01)
    assert matched(dose.kl, dose.target).all()  # on the half it was bisected on
    # on the other half: a[d, 1 and 3]·k², against v*'s mean there at k = 1
    np.testing.assert_allclose(dose.verify_kl, a[:, [1, 3]].mean(axis=1) * dose.multiplier**2)
    assert dose.verify_target == pytest.approx(1.0)
    gap = dose.verify_gap()
    assert gap is not None
    np.testing.assert_allclose(gap[1], np.log(2), rtol=0.03)  # half v*'s KL there
    assert list(gap <= MATCH_TOLERANCE) == [True, False, True]


def test_without_verifying_prompts_the_dose_is_the_v2_one():
    a = np.array([[1.0, 2.0], [3.0, 1.0]])
    kl = PromptKL(a)
    at_one = a.mean(axis=1)
    dose = match_dose(kl, 2, 0, [0, 1], at_one=at_one)  # the readout's KL: no extra call
    assert all(c == [0, 1] for c in kl.calls) and len(kl.calls) == 9
    assert dose.verify_kl is None and dose.verify_gap() is None
    k, _ = bisect_dose(lambda m: kl(m, [0, 1]).mean(axis=1), 1.5, first_guess(at_one, 1.5))
    np.testing.assert_array_equal(dose.multiplier, k)
    with pytest.raises(ValueError, match="overlap"):
        match_dose(kl, 2, 0, [0, 1], [1])


PROMPTS = [
    "tell me a story about the sea .",
    "here is a small house",
    "the king and the queen had a child",
    "once a man had a good friend ,",
]


def test_the_verified_concept_free_dose_on_the_tiny_model(tiny_lm, one_thread, tmp_path):
    """``score_dose`` on the tiny Gemma: each direction bisected on one half of the
    prompts with the concept's tokens left out, its KL at that dose read again on the
    other half against v*'s there; every number recomputed here with the readout."""
    import torch

    from experiments.config import IdentifyStudyConfig
    from experiments.identify.stages.data import DirectionSet
    from experiments.identify.stages.directions import REFERENCE
    from experiments.identify.stages.matched import MATCHED
    from experiments.identify.stages.outcome import Steering, score_dose
    from experiments.likelihood_texts import LikelihoodTexts
    from experiments.rundir import RunDir
    from steering.readout import concept_token_ids, next_token_kl
    from steering.vector import Direction

    lm, layer, alpha = tiny_lm, 2, 8.0
    config = IdentifyStudyConfig(
        identify={"dose_kl": "concept_free", "dose_verify": True, "subset_doses": [2.0]}
    )
    rng = np.random.default_rng(3)
    raw = rng.standard_normal((3, lm.hidden_size))
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    ids = [REFERENCE, "a", "b"]
    vectors = DirectionSet(
        [], {"dog": {d: Direction.of("dog", d, unit[j]) for j, d in enumerate(ids)}}
    )
    texts = LikelihoodTexts(
        on={"dog": ["the dog is a small animal .", "a dog and a cat ."]},
        off={"dog": ["the sea is blue .", "a tree and a flower ."]},
        off_source={"dog": ["sea", "tree"]},
        seed=0,
    )
    run_dir = RunDir(tmp_path, "run").create()
    steering = Steering(lm, config, run_dir, layer, alpha, {"dog": 1.0}, vectors)
    words = {"dog": ["dog", "cat"]}
    rows = score_dose(steering, texts, ["dog"], {}, {"dog": PROMPTS}, words=words)
    matching, verifying = matching_split(len(PROMPTS), config.seed)
    tokens = concept_token_ids(lm, ["dog", "cat"])
    facts = {r["direction"]: r for r in rows if r["dose"] == MATCHED}
    assert set(facts) == set(ids) and {r["dose"] for r in rows} == {MATCHED, "2x"}
    dirs = torch.as_tensor(unit, dtype=torch.float32)

    def kl(k, at, exclude=tokens):
        coefs = torch.as_tensor(np.asarray(k) * alpha, dtype=torch.float32)
        return next_token_kl(lm, [PROMPTS[q] for q in at], layer, dirs, coefs, exclude=exclude)

    k = np.array([facts[d]["multiplier"] for d in ids])
    on_matching, on_verifying = kl(k, matching), kl(k, verifying)
    at_beta = kl(np.ones(3), verifying)[0].mean()
    for j, d in enumerate(ids):
        r = facts[d]
        assert r["kl_kind"] == "concept_free"
        assert r["kl"] == pytest.approx(on_matching[j].mean(), rel=1e-4)
        assert r["kl_verify"] == pytest.approx(on_verifying[j].mean(), rel=1e-4)
        # v*'s KL at β, measured in another batch than the test's: float32 rounding of a
        # 0.0017-nat KL differs by 1.5e-4 (relative) on an Intel Sapphire Rapids CPU,
        # under 1e-4 on AMD EPYC; a wrong target would be off by far more
        assert r["kl_verify_target"] == pytest.approx(at_beta, rel=1e-3)
        assert r["kl_target"] == pytest.approx(kl(np.ones(3), matching)[0].mean(), rel=1e-4)
    assert matched(np.array([facts[d]["kl"] for d in ids]), facts[REFERENCE]["kl_target"]).all()
    # the halves differ, so the same numbers read on the matching half would not pass
    assert not np.allclose(on_matching.mean(axis=1), on_verifying.mean(axis=1), rtol=0.05)
    # the concept-free KL is not the plain one: the concept's tokens moved too
    plain = kl(k, matching, exclude=())
    assert not np.allclose(plain.mean(axis=1), on_matching.mean(axis=1), rtol=1e-3)
    # a resume scores nothing again
    again = score_dose(steering, texts, ["dog"], {}, {"dog": PROMPTS}, words=words)
    assert again == read_jsonl(run_dir.file(RunDir.DOSE)) and len(again) == len(rows)


def _dose_rows(frame, subset, rng):
    """Matched-dose records for the toy's subset: the matching KL on target, the
    verifying KL off it by a known log gap for about half the directions."""
    part = frame[frame["concept"].isin(subset)]
    common = {"dose": "matched", "e": 0.1, "multiplier": 1.0, "kl": 0.2, "kl_target": 0.2}
    return [
        {
            **common,
            "concept": c,
            "direction": d,
            "kl_kind": "concept_free",
            "kl_verify": 0.3 * np.exp(0.5 if rng.random() < 0.5 else 0.01),
            "kl_verify_target": 0.3,
        }
        for c, d in zip(part["concept"], part["direction"], strict=True)
    ]


def test_the_record_and_summary_carry_the_share_matched_on_held_apart_prompts():
    from experiments.identify.simulation.simulate import toy_study
    from experiments.identify.stages.subset import subset_columns
    from experiments.identify.subset_analysis import subset_outcomes
    from experiments.identify.summary import subset_lines
    from experiments.record import SubsetResult

    toy = toy_study(3, "convex")
    toy["direction"] = toy.groupby("concept").cumcount().astype(str)
    subset = ["c00", "c01", "c02", "c03"]
    rows = _dose_rows(toy, subset, np.random.default_rng(0))
    subset_columns(toy, rows, pd.DataFrame())
    inside = toy["concept"].isin(subset)
    assert toy.loc[inside, "dose_matched"].all()  # on the prompts it was bisected on
    gaps = toy.loc[inside, "dose_verify_gap"].to_numpy()
    assert set(np.round(gaps, 6)) == {0.01, 0.5}
    held = toy.loc[inside, "dose_matched_verify"].astype(bool).to_numpy()
    np.testing.assert_array_equal(held, gaps <= MATCH_TOLERANCE)
    assert toy.loc[~inside, "dose_verify_gap"].isna().all()
    out = subset_outcomes(toy, subset, n_boot=49)
    assert out.matched_share == 1.0
    assert out.matched_share_verify == pytest.approx(held.mean())
    assert 0 < out.matched_share_verify < 1 and out.matched_on == "concept_free"
    line = subset_lines(out)[0]
    assert "100% within 10% on the prompts it was bisected on" in line
    assert f"{held.mean():.0%} on held-apart prompts" in line and "tokens left out" in line
    # a v2 record (no verification) reads as before
    old = out.model_dump(exclude={"matched_share_verify", "matched_on"})
    assert subset_lines(SubsetResult.model_validate(old))[0].endswith("100% within 10%).")


def test_a_declared_outcome_reaches_the_record_summary_answer_and_metrics():
    """identify/measures.py declares the subset's outcomes once: the generated outcome's
    column, slopes (beside log KL), agreement, summary line, answer row and MLflow metrics
    all come from that declaration; a record written before the declarations (its own
    ``generated``/``name_free`` fields) reads as the same declared outcomes."""
    from experiments.identify.answer import answer_of
    from experiments.identify.measures import OUTCOMES
    from experiments.identify.publish import parent_metrics
    from experiments.identify.simulation.simulate import toy_study
    from experiments.identify.subset_analysis import subset_outcomes
    from experiments.identify.summary import subset_lines
    from experiments.record import SubsetResult

    toy = toy_study(3, "convex")
    toy["direction"] = toy.groupby("concept").cumcount().astype(str)
    rng = np.random.default_rng(1)
    toy["gen_effect"] = 2.0 * toy["effect"] + rng.normal(0, 1e-4, len(toy))
    toy["kl"] = np.exp(rng.normal(0, 0.3, len(toy)))
    subset = ["c00", "c01", "c02", "c03"]
    out = subset_outcomes(toy, subset, n_boot=49)
    assert set(out.outcomes) == {"generated"}  # no name-free column: not measured
    sub = SubsetResult.model_validate(out.model_dump())  # as the record reads it back
    generated = sub.outcomes["generated"]
    # Δ is twice the likelihood outcome (and a little noise): so is its slope
    twice = 2.0 * sub.likelihood_1x.estimate
    assert generated.slopes["auroc"].estimate == pytest.approx(twice, rel=0.01)
    assert generated.given_dose is not None
    assert generated.agreement is not None and generated.agreement.all.estimate > 0.5
    (line,) = [x for x in subset_lines(sub) if x.startswith("- Generated")]
    assert line.startswith(f"- {OUTCOMES['generated'].label}: the AUROC slope (flexible) is")
    assert "beside log KL" in line and "agree within concepts" in line
    # an old record spelled it in fields of its own
    written = out.model_dump()
    old = {k: v for k, v in written.items() if k != "outcomes"}
    old |= {
        "generated": written["outcomes"]["generated"]["slopes"]["auroc"],
        "generated_given_dose": written["outcomes"]["generated"]["given_dose"],
        "agreement": written["outcomes"]["generated"]["agreement"],
        "name_free": {
            "auroc": written["likelihood_1x"],
            "auroc_name_free": written["likelihood_1x"],
        },
    }
    again = SubsetResult.model_validate(old)
    assert again.outcomes["generated"] == generated
    assert set(again.outcomes["name_free"].slopes) == {"auroc", "auroc_name_free"}
    assert [x for x in subset_lines(again) if x.startswith("- Generated")] == [line]
    # the answer's row and the parent's metrics: the v3 development run's record with it
    from pathlib import Path

    from experiments.record import IdentifyRecord

    stored = Path(__file__).parents[3] / "bench/identify_dev_v3/analysis.json"
    record = IdentifyRecord.parse(stored.read_text(encoding="utf-8"))
    assert not record.identified.subset.outcomes  # v3's confirmatory design: no subset
    record.identified.subset = again
    keys = {v.key for v in answer_of(record).verdicts}
    assert {"identified/subset/generated", "identified/subset/name_free"} <= keys
    metrics, _ = parent_metrics(record)
    assert metrics["subset/generated/auroc"] == pytest.approx(generated.slopes["auroc"].estimate)
    assert "subset/name_free/auroc_name_free" in metrics
