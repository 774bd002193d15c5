"""The one runner: a study's lifecycle is run_study's, whatever the study computes.

A small real study (it counts the run's concepts, or breaks on purpose) runs through
``run_study`` on the tiny Gemma and a real MLflow store: the parent run's end state, the
parameters logged once, the config written, the record written once and last with
every stage's time, a resume reopening the same run, and a rescore keeping the stored
config as it was written.
"""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field

from experiments import tracking
from experiments.answer import Answer
from experiments.config import Phase5Config, load_config
from experiments.kernel.lifecycle import RunSession, load_graph
from experiments.kernel.publisher import ChildRun, Views
from experiments.kernel.study import Begun, Finished, Opening, Resume, config_params, run_study
from experiments.rundir import RunDir

RECORD = "count.json"
PUBLISHING = ("figures", "views", "mlflow_parent", "child_runs")


class CountRecord(BaseModel):
    run_id: str
    concepts: int
    timings: dict[str, float] = Field(default_factory=dict)


class CountStudy:
    """Counts the run's concepts; ``breaks`` raises inside its stages."""

    phase = "phase5"
    record_file = RECORD

    def __init__(self, breaks: type[BaseException] | None = None) -> None:
        self.breaks = breaks
        self.began: list[bool] = []  # whether the session was new, at each begin
        self.views_saw: dict[str, float] = {}

    def begin(self, session: RunSession[Phase5Config]) -> Begun[list[str]]:
        """Prepares the concepts it counts: the later steps take them, not the study."""
        self.began.append(session.existing is None)
        concepts = [c.synset for c in session.graph.concepts]
        return Begun(Opening("count", {"phase": "count"}), concepts)

    def started(
        self, session: RunSession[Phase5Config], new: bool, concepts: list[str]
    ) -> dict[str, object]:
        session.directory.write_json("started.json", {"new": new, "concepts": concepts})
        return {"n_concepts": len(concepts), **config_params(session.config)}

    def stages(
        self, session: RunSession[Phase5Config], concepts: list[str]
    ) -> Finished[CountRecord, int]:
        with session.timer.time("counting"):
            if self.breaks is not None:
                raise self.breaks("on purpose")
            n = len(concepts)
        assert session.run_id is not None
        return Finished(CountRecord(run_id=session.run_id, concepts=n), n)

    def views(self, record: CountRecord, products: int) -> Views:
        self.views_saw = dict(record.timings)
        answer = Answer("count", record.run_id, "how many concepts?", 0.95)
        return Views(
            answer=answer,
            summary=f"{products} concepts\n",
            metrics={"n": products},
            experiment="count-study",
        )

    def children(self, record: CountRecord, products: int) -> list[ChildRun]:
        return [ChildRun("part", "part one", {"part": "1"}, metrics={"n": float(products)})]


def tiny_config(tmp_path):
    return load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "layer=2",
            "tracking.traces=false",
            "tracking.experiment=count-study",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )


def test_a_study_runs_through_the_one_lifecycle(tmp_path, mlflow_store, tiny_lm, embedder):
    config = tiny_config(tmp_path)
    study = CountStudy()
    ran = run_study(study, config, lm=tiny_lm, embedder=embedder)
    run = tracking.get_run(ran.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "count"
    assert run.data.params["n_concepts"] == "2"
    assert run.data.params["config.layer"] == "2"
    assert run.data.tags["phase"] == "count"
    folder = RunDir(config.results_dir, ran.run_id)
    assert folder.file(RunDir.CONFIG).exists()
    # what begin prepared reached started and the stages (the study kept none of it)
    concepts = [c.synset for c in load_graph(config).concepts]
    assert json.loads(folder.file("started.json").read_text()) == {
        "new": True, "concepts": concepts,
    }  # fmt: skip
    assert not hasattr(study, "concepts")
    # the record: written last, once, with every stage's time (publishing included)
    written = CountRecord.model_validate_json(folder.file(RECORD).read_text())
    assert written == ran.record and written.concepts == 2
    assert {"model_load", "mlflow_open", "counting", *PUBLISHING} <= set(written.timings)
    # the views were drawn from the record with the stages before publishing
    assert "counting" in study.views_saw and "mlflow_parent" not in study.views_saw
    assert folder.file(RunDir.ANSWER).exists() and folder.file(RunDir.SUMMARY).exists()
    metrics = run.data.metrics
    assert metrics["n"] == 2.0
    assert metrics["time/counting"] == pytest.approx(written.timings["counting"])
    assert RECORD in {a.path for a in tracking.client().list_artifacts(ran.run_id)}
    children = tracking.child_runs(ran.run_id, config.experiment)
    assert [c.data.tags["part"] for c in children] == ["1"]


@pytest.mark.parametrize(
    ("raised", "status"), [(KeyboardInterrupt, "KILLED"), (RuntimeError, "FAILED")]
)
def test_a_broken_study_ends_its_run_and_writes_no_record(
    raised, status, tmp_path, mlflow_store, tiny_lm, embedder
):
    config = tiny_config(tmp_path)
    with pytest.raises(raised):
        run_study(CountStudy(breaks=raised), config, lm=tiny_lm, embedder=embedder)
    runs = tracking.client().search_runs(
        [tracking.experiment_id(config.experiment)],
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    assert runs[0].info.status == status
    folder = RunDir(config.results_dir, runs[0].info.run_id)
    assert folder.file(RunDir.CONFIG).exists() and not folder.file(RECORD).exists()


def test_a_resume_reopens_the_run_and_a_rescore_keeps_the_config_file(
    tmp_path, mlflow_store, tiny_lm, embedder
):
    config = tiny_config(tmp_path)
    first = run_study(CountStudy(), config, lm=tiny_lm, embedder=embedder)
    folder = RunDir(config.results_dir, first.run_id)
    study = CountStudy()
    again = run_study(study, resume=Resume(first.run_id), lm=tiny_lm, embedder=embedder)
    assert again.run_id == first.run_id and study.began == [False]
    assert json.loads(folder.file("started.json").read_text())["new"] is False
    # the child is logged once, whatever the number of publications
    assert len(tracking.child_runs(first.run_id, config.experiment)) == 1
    # a rescore, with overrides or without, leaves the stored config byte for byte (its
    # own config goes beside it: Phase5Rescore, tests/experiments/cli/test_provenance.py)
    stored = folder.file(RunDir.CONFIG)
    stored.write_text(stored.read_text() + "# written by an older release\n")
    before = stored.read_bytes()
    run_study(CountStudy(), resume=Resume(first.run_id, "rescore"), embedder=embedder)
    assert stored.read_bytes() == before
    changed = Resume(first.run_id, "rescore", ("gate.perplexity_multiple=10",))
    run_study(CountStudy(), resume=changed, embedder=embedder)
    assert stored.read_bytes() == before
    assert tracking.get_run(first.run_id).info.status == "FINISHED"


class ElsewhereStudy(CountStudy):
    """A study of a Phase 5 config whose runs live apart from Phase 5's (its own
    experiment and results folder, as the strength sweep's), with a series by step."""

    def __init__(self, root) -> None:
        super().__init__()
        self.root = root
        self.embedders: list[object] = []

    def begin(self, session: RunSession[Phase5Config]) -> Begun[list[str]]:
        self.embedders.append(session.embedder)
        concepts = [c.synset for c in session.graph.concepts]
        return Begun(
            Opening("elsewhere", {"phase": "count"}, "count-elsewhere", self.root), concepts
        )

    def views(self, record: CountRecord, products: int) -> Views:
        shown = super().views(record, products)
        shown.steps = [(place, {"place": float(place * products)}) for place in range(3)]
        return shown


def test_a_study_may_name_its_own_experiment_and_results_folder(tmp_path, mlflow_store, tiny_lm):
    config = tiny_config(tmp_path)
    study = ElsewhereStudy(tmp_path / "own")
    ran = run_study(study, config, lm=tiny_lm, need_embedder=False)
    run = tracking.get_run(ran.run_id)
    assert run.info.experiment_id == tracking.experiment_id("count-elsewhere")
    assert run.info.experiment_id != tracking.experiment_id(config.experiment)
    assert ran.run_dir == tmp_path / "own" / ran.run_id
    assert (ran.run_dir / RECORD).exists() and (ran.run_dir / RunDir.CONFIG).exists()
    assert not RunDir(config.results_dir, ran.run_id).exists()
    assert study.embedders == [None]  # no embedder loaded when the study needs none
    history = tracking.client().get_metric_history(ran.run_id, "place")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.0), (1, 2.0), (2, 4.0)]
    # a resume finds the folder from the run alone, wherever the study put it
    again = run_study(ElsewhereStudy(tmp_path / "ignored"), resume=Resume(ran.run_id), lm=tiny_lm)
    assert again.run_dir == ran.run_dir and not (tmp_path / "ignored").exists()
