"""Measurement on a real run: suppression on concept-naming prompts, the likelihood
outcome of every direction family, reliabilities and corrected correlations, Δ's scale,
the specificity criteria; and that a rescore reproduces every one of them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.concepts import load_concepts
from experiments.config import ConfigError, load_config
from experiments.kernel.plan import planned_rows
from experiments.phase5.measurement import PREDICTOR_AGGREGATES
from experiments.phase5.run import rescore, run_phase5
from experiments.record import RECORD_VERSION
from experiments.rundir import RunDir

PROPS = settings(derandomize=True, deadline=None, max_examples=60)
NAMING = "generation.suppression_prompts=['Tell me about {concept}.', 'What is {concept}?']"


def test_suppression_prompts_take_the_negative_strengths_only():
    config = load_config(
        "configs/phase5.yaml",
        ["concepts.limit=2", "generation.prompts=['Here is a story:', 'Once upon a time']", NAMING],
    )
    graph = load_concepts(config.concepts.file, limit=2)
    rows = [meta for _, meta in planned_rows(config, graph)]
    for meta in rows:
        naming = meta["prompt_index"] >= 2  # the suppression prompts follow the neutral ones
        if meta["strength"] > 0:
            assert not naming, meta
        if meta["strength"] < 0:
            assert naming and meta["concept_name"] in meta["prompt"], meta
    # every steered row still has its unsteered twin on the same prompt
    units = {(m["concept"], m["prompt_index"], m["sample"]) for m in rows if m["strength"] == 0}
    assert all((m["concept"], m["prompt_index"], m["sample"]) in units for m in rows)
    # concepts × 4 prompts × (s = 0, and the concept and random arms at one sign)
    assert len(rows) == 2 * 4 * 3


def test_suppression_prompts_must_name_the_concept():
    with pytest.raises(ConfigError, match="suppression_prompts must each name the concept"):
        load_config(None, ["generation.suppression_prompts=['Here is a story:']"])


def test_the_default_plan_is_unchanged_without_suppression_prompts():
    config = load_config("configs/phase5.yaml", ["concepts.limit=2"])
    graph = load_concepts(config.concepts.file, limit=2)
    rows = list(planned_rows(config, graph))
    assert len(rows) == 2 * 3 * (3 + 2)  # concepts × prompts × (3 concept + 2 random)


@PROPS
@given(
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=6, max_size=30),
    st.integers(0, 2**31 - 1),
)
def test_the_vectorised_auroc_is_sklearn_s(scores, seed):
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(len(scores)) % 2)
    units = np.stack([scores, labels, np.zeros(len(scores))], axis=1)[None]
    got = PREDICTOR_AGGREGATES["auroc"](units)[0]
    assert got == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    one_class = units.copy()
    one_class[..., 1] = 1
    assert np.isnan(PREDICTOR_AGGREGATES["auroc"](one_class)[0])


@PROPS
@given(
    st.lists(st.floats(-3, 3, allow_nan=False), min_size=4, max_size=24),
    st.integers(0, 2**31 - 1),
    st.sampled_from([0.0, 0.5, -1.0, float("nan")]),
    st.booleans(),
)
def test_the_vectorised_f1_is_sklearn_s_bit_for_bit(scores, seed, threshold, calibrated):
    """F1 over many resamples at once equals sklearn's f1_score on each resample exactly
    (==, not approx), with either label missing, no positive prediction and a missing
    (NaN) threshold among the cases."""
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(seed)
    n = len(scores)
    labels = rng.integers(0, 2, size=n).astype(np.float64)
    units = np.stack([np.asarray(scores), labels, np.full(n, threshold)], axis=1)
    resamples = units[rng.integers(0, n, size=(40, n))]  # (40, n, 3), as a bootstrap draws
    name = "f1_calibrated" if calibrated else "f1_raw"
    got = PREDICTOR_AGGREGATES[name](resamples)
    cut = threshold if calibrated else 0.0
    want = [
        float(f1_score(u[:, 1], (u[:, 0] > cut).astype(int), zero_division=0)) for u in resamples
    ]
    assert got.shape == (40,)
    assert got.tolist() == want
    # split-half layout: (splits, concepts, units, 3) keeps each leading axis
    assert PREDICTOR_AGGREGATES[name](resamples.reshape(8, 5, n, 3)).reshape(-1).tolist() == want


@pytest.fixture(scope="module")
def measured_run(tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded):
    tmp = tmp_path_factory.mktemp("measurement")
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=4",
            "generation.max_new_tokens=6",
            "generation.batch_size=16",
            "generation.samples_per_prompt=2",
            "generation.prompts=['Here is a story:', 'Once upon a time']",
            NAMING,
            "layer=2",
            "likelihood.enabled=true",
            "likelihood.texts=4",
            "likelihood.neutral_nulls=1",
            "likelihood.other_nulls=1",
            "criteria.n_boot=200",
            "criteria.reliability_splits=20",
            f"classifier.dir={tmp / 'cls'}",
            f"tracking.results_dir={tmp / 'res'}",
        ],
    )
    with single_threaded():
        return config, run_phase5(config, lm=tiny_lm, embedder=embedder)


def test_the_run_measures_every_direction_family_and_its_reliability(measured_run):
    config, result = measured_run
    run_dir = RunDir(config.tracking.results_dir, result.run_id)
    records = run_dir.read_likelihood()
    families = {
        r["arm"].split(":")[0] if not r["arm"].startswith("null") else r["arm"].rsplit(":", 1)[0]
        for r in records
    }
    assert {"concept", "random", "null:neutral", "null:other"} <= families
    assert {r["strength"] for r in records} == {-1.0, 1.0}
    assert len({(r["concept"], r["pair"]) for r in records}) == 4 * 4
    m = result.record.statistics.measurement
    assert m is not None
    rel = m.reliability
    assert {
        "effect_above_null_pos",
        "effect_above_null_neg",
        "likelihood_pos",
        "likelihood_neg",
        "predictor_f1_calibrated",
    } <= set(rel)
    for value in rel.values():  # a number or a reason, never a silent NaN
        assert value.estimate is None or np.isfinite(value.estimate)
        assert value.estimate is not None or value.reason
    summary = {(row.family, row.sign): row for row in m.likelihood}
    assert {("concept", "pos"), ("null:other", "neg")} <= set(summary)
    assert summary[("random", "pos")].above is not None
    assert summary[("concept", "pos")].above is None
    assert m.reference_gap is not None and m.reference_gap.gap.evaluable
    assert {"v2_specificity_pos", "v2_specificity_neg"} <= set(result.record.criteria)
    concept = next(iter(result.record.per_concept.values()))
    assert {"likelihood_pos", "reference_gap", "specificity_pos"} <= set(concept)
    assert result.record.detection and result.record.version == RECORD_VERSION


def test_a_rescore_reproduces_the_measurement_without_the_model(
    measured_run, embedder, single_threaded
):
    _, result = measured_run
    # On the run's one torch thread: the embedder's fp32 sums differ in the last bits
    # between thread counts on some CPUs (1.3e-7 on an AMX Xeon), and so would the numbers.
    with single_threaded():
        again = rescore(result.run_id, embedder=embedder)
    assert again.record.statistics.measurement == result.record.statistics.measurement
    assert again.record.criteria == result.record.criteria
