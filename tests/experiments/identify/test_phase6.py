"""A Phase 6 run's training curve re-analysed from its saved generations and probes."""

from __future__ import annotations

import json

import pytest

from experiments.calibration import QUICK
from experiments.calibration.study import run_calibration
from experiments.config import load_config
from experiments.identify.estimation.phase6 import parse_tag, reanalyse
from experiments.rundir import RunDir


@pytest.fixture(scope="module")
def phase6(tmp_path_factory, mlflow_store, tiny_lm, embedder):
    import torch

    tmp = tmp_path_factory.mktemp("phase6")
    config = load_config(
        "configs/phase6.yaml",
        [
            "layer=2",
            "calibration.sources=['classifier', 'diffmean']",
            "generation.max_new_tokens=6",
            f"classifier.dir={tmp / 'cls'}",
            f"calibration.results_dir={tmp / 'res'}",
        ],
        overlays=[QUICK],
    )
    torch.set_num_threads(1)
    result = run_calibration(config, lm=tiny_lm, embedder=embedder)
    return config, result


def test_tags_parse_back_into_probe_sets():
    spec = parse_tag("L9-2x2x2-s1-classifier_deformat")
    assert (spec.layer, spec.size, spec.seed, spec.source) == (9, "2x2x2", 1, "classifier_deformat")
    assert spec.tag == "L9-2x2x2-s1-classifier_deformat"


def test_the_curve_is_rebuilt_and_diffmean_is_scored_as_its_own_detector(phase6, tiny_lm):
    config, result = phase6
    run_dir = RunDir(config.calibration.results_dir, result.run_id)
    frame, out = reanalyse(str(run_dir.path), tiny_lm, n_boot=100, seed=0)
    assert out.run == result.run_id
    assert len(frame) == len(result.curve)
    # the effects are the run's own (rebuilt from its saved texts)
    merged = frame.merge(result.curve, on=["tag", "concept"], suffixes=("", "_run"))
    assert (merged["effect_above_null"] - merged["effect_above_null_run"]).abs().max() < 1e-12
    # a probe's projection is its decision: the classifier rows keep the probe's AUROC (up
    # to ties: the tiny vocabulary maps many test texts to the same tokens, and activations
    # batched differently break their exact ties differently)
    saved = json.loads(run_dir.file(RunDir.PROBE_SETS).read_text())
    for _, row in frame[frame["source"] == "classifier"].iterrows():
        assert row["auroc"] == pytest.approx(saved[row["tag"]][row["concept"]]["auroc"], abs=0.02)
    # the diffmean rows are scored on the diffmean direction, not borrowed from the probe
    diff = frame[frame["source"] == "diffmean"]
    borrowed = [saved[t][c]["auroc"] for t, c in zip(diff["tag"], diff["concept"], strict=True)]
    assert list(diff["auroc"]) != pytest.approx(borrowed)
    largest = frame[(frame["size"] == "2x2x2") & (frame["source"] == "diffmean")]
    assert largest["cos_ref"].round(9).eq(1).all()  # v* is the diffmean at the largest size
    assert {f.predictor for f in out.fits} >= {"auroc", "cos_ref"}
    for fit in out.fits:
        assert (
            fit.mixed.evaluable or fit.mixed.reason
        ) and fit.within_slope_given_log_n is not None
