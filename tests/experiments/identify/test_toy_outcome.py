"""A new identify outcome is one declaration: a toy registered here, and nowhere else,
reaches the tiny run's record, ``answer.md``, summary and MLflow metrics (issue 65's
acceptance for identify; the declaration is the 20 lines of ``toy_outcome``)."""

from __future__ import annotations

import pytest

from experiments import tracking
from experiments.config import load_config
from experiments.identify import QUICK
from experiments.identify.measures import OUTCOMES, SLOPES, DirectionOutcome, Key
from experiments.identify.study import run_identify
from experiments.rundir import RunDir


def _twice_generated(outcomes) -> dict[Key, float]:
    """The toy: twice the gated Δ at s = +1 of every generated direction."""
    gen = outcomes.generated
    if not len(gen):
        return {}
    up = gen[gen["sign"] == 1].groupby(["concept", "direction"])["e_gen"].mean()
    return {(str(c), str(d)): 2 * float(v) for (c, d), v in up.items()}


@pytest.fixture(scope="module")
def toy_outcome():
    OUTCOMES.register(
        "toy_twice",
        DirectionOutcome(
            "Toy outcome on the subset (twice the generated Δ)",
            values=_twice_generated,
            estimators=SLOPES,
            answer="on the toy outcome",
            column="toy_twice_effect",
        ),
    )
    yield "toy_twice"
    OUTCOMES.pop("toy_twice")


@pytest.fixture(scope="module")
def toy_run(toy_outcome, tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded):
    tmp = tmp_path_factory.mktemp("toy-outcome")
    config = load_config(
        "configs/identify.yaml",
        ["layer=2", "identify.limit=3", "identify.split_seed=4",
         "generation.max_new_tokens=4", "criteria.n_boot=100",
         f"identify.results_dir={tmp / 'res'}", "identify.subset_concepts=3"],
        overlays=[QUICK],
    )  # fmt: skip
    with single_threaded():
        return run_identify(config, lm=tiny_lm, embedder=embedder)


def test_a_registered_outcome_reaches_the_record_answer_summary_and_metrics(toy_run):
    block = toy_run.record.identified.subset.outcomes["toy_twice"]
    assert set(block.slopes) == {"auroc"}
    folder = RunDir(toy_run.run_dir.parent, toy_run.run_id)
    assert "on the toy outcome" in folder.file(RunDir.ANSWER).read_text()
    assert "- Toy outcome on the subset" in folder.file(RunDir.SUMMARY).read_text()
    fit = block.slopes["auroc"]
    metrics = tracking.get_run(toy_run.run_id).data.metrics
    assert fit.estimate is not None and fit.n_clusters == 3
    assert metrics["subset/toy_twice/auroc"] == pytest.approx(fit.estimate)
    assert metrics["subset/toy_twice/auroc/low"] == pytest.approx(fit.low)
    # the toy is twice the generated Δ, so its slope is twice the generated outcome's
    generated = toy_run.record.identified.subset.outcomes["generated"].slopes["auroc"]
    assert generated.estimate is not None
    assert fit.estimate == pytest.approx(2 * generated.estimate)
