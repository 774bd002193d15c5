"""A new Phase 5 outcome is one declaration: a toy registered here, and nowhere else,
reaches the tiny run's record, ``answer.md``, summary and MLflow metrics (issue 65's
acceptance for Phase 5; the declaration is the ``OUTCOMES.register`` of ``toy_outcome``)."""

from __future__ import annotations

import pytest

from experiments import tracking
from experiments.kernel.outcomes import OUTCOMES, Outcome
from experiments.phase5.run import run_phase5
from experiments.rundir import RunDir


@pytest.fixture(scope="module")
def toy_outcome():
    OUTCOMES.register(
        "toy_twice",
        Outcome(
            "toy (twice e)",
            values=lambda effects: 2 * effects["e"],
            answer="toy outcome: twice the ungated effect",
        ),
    )
    yield "toy_twice"
    OUTCOMES.pop("toy_twice")


@pytest.fixture(scope="module")
def toy_run(toy_outcome, tmp_path_factory, mlflow_store, tiny_lm, embedder, tiny_phase5_config,
            single_threaded):  # fmt: skip
    config = tiny_phase5_config(tmp_path_factory.mktemp("toy-outcome"))
    with single_threaded():
        return run_phase5(config, lm=tiny_lm, embedder=embedder)


def test_a_registered_outcome_reaches_the_record_answer_summary_and_metrics(toy_run):
    record = toy_run.record
    arm = record.statistics.effect["concept/pos"]
    toy, e = arm.outcomes["toy_twice"], arm.outcomes["e"]
    # twice the effect per text, the same concepts resampled: twice its mean and interval
    assert toy.estimate is not None and e.estimate is not None
    assert toy.estimate == pytest.approx(2 * e.estimate)
    assert (toy.low, toy.high) == pytest.approx((2 * e.low, 2 * e.high))
    assert toy.n_clusters == e.n_clusters == 3
    # every arm and sign has it, and the record reads back with it
    assert all("toy_twice" in a.outcomes for a in record.statistics.effect.values())
    folder = RunDir(toy_run.results_dir.parent, record.run_id)
    again = type(record).parse(folder.file(RunDir.RECORD).read_text())
    assert again.statistics.effect["concept/pos"].outcomes["toy_twice"] == toy
    answer = folder.file(RunDir.ANSWER).read_text()
    assert "toy outcome: twice the ungated effect (reference)" in answer
    assert "| toy (twice e) |" in folder.file(RunDir.SUMMARY).read_text()
    metrics = tracking.get_run(record.run_id).data.metrics
    assert metrics["effect/concept/pos/toy_twice_mean"] == pytest.approx(toy.estimate)
    assert metrics["effect/concept/neg/toy_twice_high"] == pytest.approx(
        record.statistics.effect["concept/neg"].outcomes["toy_twice"].high
    )


def test_without_the_toy_an_old_record_still_shows_its_column_by_name(toy_run):
    from experiments.phase5.report import effect_markdown

    OUTCOMES.pop("toy_twice")
    try:
        lines = effect_markdown(toy_run.record.statistics, {})
    finally:
        OUTCOMES.register("toy_twice", Outcome("toy (twice e)", values=lambda f: 2 * f["e"]))
    assert any("| toy_twice |" in line for line in lines)
