"""The parent run's MLflow metrics, read from the typed record of the v3 development run
(bench/identify_dev_v3/analysis.json, committed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.identify.publish import manipulation_metrics, parent_metrics, slug
from experiments.record import IdentifyRecord

DEV = Path(__file__).resolve().parents[3] / "bench" / "identify_dev_v3" / "analysis.json"


@pytest.fixture(scope="module")
def record() -> IdentifyRecord:
    return IdentifyRecord.model_validate(json.loads(DEV.read_text(encoding="utf-8")))


def test_every_estimand_and_reliability_is_a_metric_beside_the_primary(record) -> None:
    metrics, tags = parent_metrics(record)
    built = record.estimands["practitioner_equal_norm"].fit
    assert built is not None and built.estimate is not None
    assert metrics["estimand/practitioner_equal_norm"] == pytest.approx(built.estimate)
    assert metrics["estimand/practitioner_equal_norm/low"] == pytest.approx(built.low)
    assert metrics["primary/slope"] == pytest.approx(record.primary.slope.estimate)
    assert tags["identify.primary_verdict"] == record.primary.verdict
    # an estimand the run could not estimate has no number, not a zero
    assert record.estimands["equal_geometry"].fit is None
    assert not any(k.startswith("estimand/equal_geometry/") for k in metrics)
    assert "estimand/equal_geometry" not in metrics
    rel = record.outcome_reliability["effect_practitioner_directions"]
    assert metrics["outcome_reliability/effect_practitioner_directions"] == rel.estimate
    assert all(v is None or v == v for v in metrics.values())  # no NaN reaches MLflow


def test_a_manipulations_metrics_are_prefixed_on_the_parent(record) -> None:
    metrics, _ = parent_metrics(record)
    for name, result in record.manipulations.items():
        own, _ = manipulation_metrics(result)
        assert own, name
        for key, value in own.items():
            assert metrics[f"{slug(name)}/{key}"] == value
    assert metrics["pooled/slope_auroc"] == pytest.approx(record.pooled.slope_auroc.estimate)


def test_the_estimands_figure_marks_the_primary_and_draws_no_point_without_an_estimate(
    record,
) -> None:
    import matplotlib.pyplot as plt

    from experiments.identify.figures import estimands_figure

    fig = estimands_figure(record)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "practitioner_equal_norm (primary)"
    assert "equal_geometry: not evaluable" in labels
    assert "practitioner: not measured" in labels
    points = [line for line in ax.lines if line.get_marker() == "o"]
    estimated = [e for e in record.estimands.values() if e.fit and e.fit.estimate is not None]
    assert len(points) == len(estimated)
    plt.close(fig)


def test_every_parent_figure_is_drawn_from_the_typed_record(record) -> None:
    import matplotlib.pyplot as plt
    import pandas as pd

    from experiments.identify.estimation.cells import StudyTables
    from experiments.identify.estimation.compare import read_directions
    from experiments.identify.figures import figures

    drawn = figures(StudyTables(read_directions(DEV.parent)), record, pd.DataFrame())
    assert set(drawn) == {
        "trajectories.png", "slopes.png", "dose_response.png", "predictors.png",
        "estimands.png",
    }  # fmt: skip
    for fig in drawn.values():
        assert fig.axes
        plt.close(fig)


def test_the_summary_from_the_typed_record_is_the_one_the_run_wrote(record) -> None:
    """summary.md of the development run was written from the record's dump; read from
    the typed record it is the same text (the stage times aside: the run wrote it before
    its last stages were timed)."""
    from experiments.identify.summary import summary_markdown

    written = (DEV.parent / "summary.md").read_text(encoding="utf-8").splitlines()
    drawn = summary_markdown(record).splitlines()
    assert drawn[:-1] == written[:-1]
    assert drawn[-1].startswith(written[-1])  # the later stages' times appended
    assert any("**practitioner_equal_norm**" in line for line in drawn)
