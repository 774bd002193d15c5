"""A finished Phase 5 parent run, and what Parts B and C read from it.

Parts B and C never spell a run folder's file names or parse MLflow parameter strings:
local files are read through :class:`~experiments.rundir.RunDir`, and when the folder is
not on this machine the same files come from the parent's MLflow artefacts (Phase 5
logs them under the same names). The experiment is always the run's own, and the
thresholds are the ones stored with the run (:func:`stored_config`).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, ConfigDict

from experiments import tracking
from experiments.rundir import RunDir, join_scores, parse_jsonl
from experiments.validation.errors import ValidationInputError

if TYPE_CHECKING:
    from mlflow.entities import Run

    from experiments.config import CriteriaConfig, RunConfig
    from experiments.kernel.publisher import ChildUpdate
    from experiments.tracking.traces import Feedback

log = logging.getLogger(__name__)

PHASE = "5"
# What a generation needs to be rated or judged (``delta`` from scores.jsonl, or from an
# old-style generations.jsonl that already holds it).
GENERATION_FIELDS = ("key", "concept", "concept_name", "strength", "delta", "text", "prompt")


class ScoredGeneration(BaseModel):
    """A scored generation (its line of ``generations.jsonl`` joined with ``scores.jsonl``)
    as Parts B and C read it, checked once where it is read. A run of the first releases
    has no arm, split, prompt index or sample (concept, report, None, None); the line's
    other fields are kept as extras (:meth:`row`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    key: str
    concept: str  # the synset
    concept_name: str
    strength: float
    delta: float
    text: str
    prompt: str  # the instruction the text continues
    arm: str = "concept"
    split: str = "report"
    prompt_index: int | None = None
    sample: int | None = None
    vectors: str | None = None  # the direction a text was steered along (identify runs)

    def row(self) -> dict[str, object]:
        """The line's fields as read (the defaulted ones left out)."""
        return self.model_dump(exclude_unset=True)


def default_experiment() -> str:
    """The experiment ``--run latest`` searches when none is given: the config default."""
    from experiments.config import Phase5Config

    return Phase5Config().experiment


def cell_key(synset: str, strength: float) -> str:
    """The ``cell`` tag Phase 5 puts on each concept × strength child run."""
    return f"{synset}|{float(strength):+.3f}"


def artifact_bytes(run_id: str, artifact_path: str) -> bytes | None:
    """An artefact's content (None when the run has no such artefact), read through a
    temporary download so nothing is left behind."""
    import mlflow

    tracking.client()  # points mlflow at the configured store
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = mlflow.artifacts.download_artifacts(
                run_id=run_id, artifact_path=artifact_path, dst_path=tmp
            )
            return Path(path).read_bytes()
    except Exception as exc:  # MLflow raises several types for "not there"
        log.debug("run %s has no artefact %s: %s", run_id, artifact_path, exc)
        return None


@dataclass
class Phase5Run:
    """A finished Phase 5 parent run and its folder (which may not exist here)."""

    run: Run
    folder: RunDir

    @property
    def run_id(self) -> str:
        return cast(str, self.run.info.run_id)  # mlflow leaves RunInfo untyped

    @property
    def tags(self) -> dict[str, str]:
        return self.run.data.tags

    @property
    def is_identify(self) -> bool:
        """An identify run (its generations: the validating directions', each text's
        direction in ``vectors``), not a Phase 5 one."""
        return self.tags.get("phase") == IDENTIFY_PHASE

    @cached_property
    def experiment(self) -> str:
        """The name of the run's own experiment: Part B and C children go beside it."""
        return tracking.client().get_experiment(self.run.info.experiment_id).name

    @cached_property
    def config(self) -> RunConfig:
        return stored_config(self)

    @property
    def criteria(self) -> CriteriaConfig:
        """The run's criterion thresholds (human_r_pass, human_r_panel, panel_*)."""
        return self.config.criteria

    def artifact_bytes(self, artifact_path: str) -> bytes | None:
        return artifact_bytes(self.run_id, artifact_path)

    def attach_feedback(
        self,
        keyed: Iterable[tuple[str, Feedback]],
        kind: str,
        source_id: str | Callable[[Feedback], str],
    ) -> dict[str, int]:
        """Each feedback on the trace of the generation it is keyed by: the counts of
        ``traces.attach_feedback``, and ``untraced`` (those whose generation has none)."""
        from experiments.tracking.traces import attach_feedback, trace_map

        experiment_id = self.run.info.experiment_id
        ids = trace_map(experiment_id, self.run_id, self.folder.file(RunDir.TRACES))
        feedback: dict[str, list[Feedback]] = {}
        untraced = 0
        for key, item in keyed:
            if key in ids:
                feedback.setdefault(ids[key], []).append(item)
            else:
                untraced += 1
        counts = attach_feedback(experiment_id, self.run_id, feedback, kind, source_id)
        return {**counts, "untraced": untraced}

    # ------------------------------------------------------------------ generations

    def scored_generations(self) -> list[ScoredGeneration]:
        """Every scored generation of the seed's grid, one per key, sorted by key: the
        concept arm on the report prompts (null-control, prompting-baseline and
        strength-selection rows are the run's own controls, not texts to rate).

        The run folder when it holds the generations (joined with scores.jsonl through
        RunDir), else the parent's artefacts ``generations.jsonl`` + ``scores.jsonl``.
        """
        folder = self.folder
        if folder.file(RunDir.GENERATIONS).exists():
            has_scores = folder.file(RunDir.SCORES).exists()
            records = folder.read_scored() if has_scores else folder.read_generations()
        else:
            generations = self.artifact_bytes(RunDir.GENERATIONS)
            if generations is None:
                raise ValidationInputError(
                    f"run {self.run_id} has no {RunDir.GENERATIONS} (neither "
                    f"{folder.file(RunDir.GENERATIONS)} nor an MLflow artefact)"
                )
            records = parse_jsonl(
                generations.decode("utf-8"), f"{self.run_id}/{RunDir.GENERATIONS}"
            )
            # joined as RunDir.read_scored joins them; an old-style generations.jsonl holds Δ
            if (scores := self.artifact_bytes(RunDir.SCORES)) is not None:
                records = join_scores(
                    records, parse_jsonl(scores.decode("utf-8"), f"{self.run_id}/{RunDir.SCORES}")
                )
        by_key: dict[str, ScoredGeneration] = {}
        for record in records:
            if all(k in record for k in GENERATION_FIELDS) and record["delta"] is not None:
                generation = ScoredGeneration.model_validate(record)
                if generation.arm == "concept" and generation.split != "selection":
                    by_key[generation.key] = generation
        if not by_key:
            raise ValidationInputError(f"run {self.run_id} has no scored generations")
        return [by_key[k] for k in sorted(by_key)]

    # ------------------------------------------------------------------ child runs

    def children(self, extra_filter: str = "") -> list[Run]:
        """Child runs of this parent (``extra_filter``: `` and ...`` search clauses)."""
        flt = f"tags.mlflow.parentRunId = '{self.run_id}'" + extra_filter
        return tracking.client().search_runs(
            [self.run.info.experiment_id], filter_string=flt, max_results=5000
        )

    def update_child(
        self, phase: str, name: str, count_tag: str, build: Callable[[str, int], ChildUpdate]
    ) -> str:
        """Its one ``phase`` child, made or updated (``kernel.publisher.update_child``)."""
        from experiments.kernel.publisher import update_child

        found = self.find_child(phase)
        return update_child(self.run_id, self.experiment, phase, name, found, count_tag, build)

    def cell_runs(self) -> dict[str, str]:
        """cell tag -> child run id for the parent's concept × strength runs."""
        runs = self.children()
        return {r.data.tags["cell"]: r.info.run_id for r in runs if "cell" in r.data.tags}

    def find_child(self, phase: str) -> str | None:
        """The (first) child run of a phase (``5B`` human, ``5C`` panel), or None."""
        runs = sorted(
            self.children(f" and tags.phase = '{phase}'"), key=lambda r: r.info.start_time
        )
        if len(runs) > 1:
            log.warning(
                "run %s has %d phase %s children; using the first", self.run_id, len(runs), phase
            )
        return runs[0].info.run_id if runs else None

    # ------------------------------------------------------------------ concepts

    def concept_lemmas(self) -> dict[str, list[str]]:
        """Lemmas per concept from the run's concept file (for topic-guess matching)."""
        from experiments.concepts import ConceptError, load_concepts

        try:
            graph = load_concepts(self.config.concepts.file)
        except ConceptError:
            return {}
        return {c.synset: list(c.lemmas) for c in graph.concepts}


IDENTIFY_PHASE = "6-identify"  # identify's parent runs (identify.study.PHASE)
RESUME = {PHASE: "steer-eval run --resume", IDENTIFY_PHASE: "steer-eval identify --resume"}


def phase5_parent(
    run_id: str,
    experiment: str | None = None,
    results_dir: str | Path | None = None,
    phases: tuple[str, ...] = (PHASE,),
) -> Phase5Run:
    """A finished parent run of one of ``phases`` (``latest``: the newest Phase 5 one in
    ``experiment``, by default the config's), or a clear error. Parts B and C read Phase 5
    runs; ``panel --rubric axbench`` also an identify run (``IDENTIFY_PHASE``), whose
    generations are its validating directions'."""
    try:
        if run_id == "latest":
            run_id = tracking.latest_parent_run(experiment or default_experiment(), PHASE)
        run = tracking.get_run(run_id)
    except LookupError as exc:
        raise ValidationInputError(str(exc)) from None
    tags = run.data.tags
    if tags.get("phase") not in phases or "mlflow.parentRunId" in tags:
        parent = tags.get("mlflow.parentRunId")
        hint = f"; its parent is {parent}" if parent else ""
        kinds = " or ".join("identify" if p == IDENTIFY_PHASE else f"Phase {p}" for p in phases)
        raise ValidationInputError(
            f"run {run_id} is not a {kinds} parent run (phase tag {tags.get('phase')!r}{hint})"
        )
    if run.info.status != "FINISHED":
        resume = RESUME.get(tags.get("phase", PHASE), RESUME[PHASE])
        raise ValidationInputError(
            f"run {run_id} is {run.info.status}, not FINISHED; finish it with `{resume} {run_id}`"
        )
    return Phase5Run(run, RunDir.locate(run, results_dir))


def stored_config(run: Phase5Run) -> RunConfig:
    """The config a run was made with, from what the run stored (never parameter strings).

    In order: the run record (``steering_results.json``, a RunRecord) in the run folder,
    else the record artefact; then ``config.yaml`` in the folder, else its artefact. A
    record that is not a RunRecord (the untyped file of older runs) is skipped, and its
    artefact is not downloaded again when the local copy was already unreadable.
    """
    from experiments.config import ConfigError, load_config
    from experiments.record import RecordError, RunRecord

    folder = run.folder
    skipped: list[str] = []
    if folder.file(RunDir.RECORD).exists():
        try:
            return folder.read_record().config
        except RecordError as exc:
            skipped.append(str(exc))
    else:
        data = run.artifact_bytes(RunDir.RECORD)
        if data is not None:
            try:
                source = f"MLflow artefact {RunDir.RECORD} of run {run.run_id}"
                return RunRecord.parse(data.decode("utf-8", "replace"), source=source).config
            except RecordError as exc:
                skipped.append(str(exc))
    for reason in skipped:
        log.info("reading the config from config.yaml instead: %s", reason)
    try:
        if folder.file(RunDir.CONFIG).exists():
            return folder.load_config()
        data = run.artifact_bytes(RunDir.CONFIG)
        if data is not None:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / RunDir.CONFIG
                path.write_bytes(data)
                return load_config(path)
    except ConfigError as exc:
        raise ValidationInputError(
            f"run {run.run_id}: its stored config is invalid: {exc}"
        ) from None
    raise ValidationInputError(
        f"run {run.run_id} has no stored config: neither {RunDir.RECORD} (a run record) nor "
        f"{RunDir.CONFIG} in {folder.path} or among its MLflow artefacts"
    )
