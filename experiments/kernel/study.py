"""The Study contract and its one runner: every kind of run is an instance.

A *study* is what a command runs: Phase 5 (``phase5/run.py``), the calibration
study (``calibration/study.py``), identify (``identify/study.py``). Each says only what
is its own (:class:`Study`): how its parent run is named and tagged, what it logs as
parameters, the files it writes once the run is open, its stages from the
:class:`~experiments.kernel.lifecycle.RunSession` to its typed record, and how that
record is shown (its :class:`~experiments.kernel.publisher.Views`, answer included, and
its child runs). :func:`run_study` owns the lifecycle once, for all of them (Inspect
AI's one eval loop over many tasks is the model):

1. open or resume the session (``open_run``: the config, the model, the executor);
2. :meth:`Study.begin`: what must be known before the parent run opens (its name), and
   what the study prepares for its later steps, handed to them (:class:`Begun`);
3. start the parent run (created, or reopened for a resume or rescore), the study's
   files and, for a new run, its parameters; then the config, written to the folder;
4. :meth:`Study.stages`: everything the study computes, ending in its record;
5. publish (:func:`~experiments.kernel.publisher.publish`): the views, the MLflow
   mirror, the child runs, and last the record, once, with every stage's time in it;
6. the parent run ends FINISHED, KILLED on Ctrl-C or FAILED on an error (the session).

A study object is made per invocation and carries the command's options (callbacks,
keys set on the command line); what :meth:`Study.begin` prepares is not kept on it but
returned, and :meth:`Study.started` and :meth:`Study.stages` take it, so no step reads
state another step may not have set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from experiments import tracking
from experiments.concepts import ConceptGraph
from experiments.config import Phase, RunConfig
from experiments.kernel.lifecycle import Resume, RunSession, open_run
from experiments.kernel.publisher import Children, Views, publish

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from steering.models import LoadedModel

C = TypeVar("C", bound=RunConfig)
R = TypeVar("R", bound=BaseModel)
P = TypeVar("P")
B = TypeVar("B")


@dataclass(frozen=True)
class Opening:
    """How a study's parent run opens: its name and the tags it starts with, and where
    a new run lives when not where its config's phase keeps runs (``config.experiment``,
    ``config.results_dir``): Phase 4's runs live in the classifier experiment, beside the
    classifiers; the strength sweep takes a Phase 5 config and keeps runs of its own."""

    name: str
    tags: dict[str, str]
    experiment: str | None = None  # None: the config's experiment
    results_root: str | Path | None = None  # None: the config's results folder


@dataclass(frozen=True)
class Begun(Generic[B]):
    """What :meth:`Study.begin` returns: how the parent run opens, and what the study
    prepared for :meth:`Study.started` and :meth:`Study.stages` (Phase 5's classifiers
    and vectors, the pooled run's shards; ``None`` when nothing)."""

    opening: Opening
    prepared: B


@dataclass(frozen=True)
class Finished(Generic[R, P]):
    """What the stages end with: the record, and what its views draw from beside it
    (Phase 5's scored rows, the calibration curve, identify's tables)."""

    record: R
    products: P


@dataclass(frozen=True)
class Ran(Generic[R, P]):
    """A study that ran: its MLflow run, its folder, its record (timings whole) and the
    products its views were drawn from."""

    run_id: str
    run_dir: Path
    record: R
    products: P


class Study(Protocol[C, R, P, B]):
    """One kind of run. ``C`` its config model, ``R`` its record, ``P`` what its stages
    produce beside the record for the views (``None`` when nothing), ``B`` what
    :meth:`begin` prepares for the later steps."""

    @property
    def phase(self) -> Phase | None:
        """The phase its stored config declares (a resume reads it back as such); None
        for a study never reopened."""
        ...

    @property
    def record_file(self) -> str:
        """The run-folder file of its record."""
        ...

    def begin(self, session: RunSession[C]) -> Begun[B]:
        """What the parent run opens as, and the work needed to know it (Phase 5 prepares
        its classifiers and vectors, whose layer names the run), for the later steps."""
        ...

    def started(self, session: RunSession[C], new: bool, prepared: B) -> dict[str, object]:
        """The run is open (``session.run_id``, ``session.run_dir``): write the study's
        own files; return the parameters a new run logs (ignored when ``new`` is False)."""
        ...

    def stages(self, session: RunSession[C], prepared: B) -> Finished[R, P]:
        """Everything the study computes, ending in its record."""
        ...

    def views(self, record: R, products: P) -> Views:
        """What the study shows of its record (the answer first)."""
        ...

    def children(self, record: R, products: P) -> Children:
        """Its child runs: each once, or a callable given the parent's id."""
        ...


def run_study(
    study: Study[C, R, P, B],
    config: C | None = None,
    *,
    resume: Resume | None = None,
    results_dir: str | Path | None = None,
    execution: dict[str, Any] | None = None,
    lm: LoadedModel | None = None,
    embedder: SentenceTransformer | None = None,
    graph: ConceptGraph | None = None,
    need_embedder: bool = True,
    need_model: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Ran[R, P]:
    """Run ``study`` once, new (``config``) or reopened (``resume``), through the steps
    of the module docstring; the only place a study's parent run is opened. ``graph``:
    the concepts when not the config's own; ``need_embedder``: False for a study that
    scores no text by its embedding (the session's embedder is then None); ``need_model``:
    False for a study that loads no model (it reads finished runs' files)."""
    with open_run(
        None if resume else config,
        resume=resume,
        results_dir=results_dir,
        execution=execution,
        lm=lm,
        embedder=embedder,
        need_embedder=need_embedder,
        graph=graph,
        progress=progress,
        phase=study.phase,
        need_model=need_model,
    ) as session:
        begun = study.begin(session)
        opening, prepared = begun.opening, begun.prepared
        timer = session.timer
        # opening the parent run (the store's schema, the provenance tags) and logging
        # its config: tracking time too, so the record holds every second of the run
        with timer.time("mlflow_open"):
            config = session.config
            run_id, new = session.start(
                opening.experiment or config.experiment,
                opening.name,
                opening.results_root or config.results_dir,
                tags=opening.tags,
            )
            params = study.started(session, new, prepared)
            if new and params:
                tracking.log_params(run_id, params)
            run_dir = session.directory
            if resume is None or resume.changes_config:
                run_dir.write_config(session.config)
        finished = study.stages(session, prepared)
        record = publish(
            session,
            finished.record,
            lambda settled: study.views(settled, finished.products),
            lambda settled: study.children(settled, finished.products),
            study.record_file,
            timer,
        )
    return Ran(run_id, run_dir.path, record, finished.products)


def config_params(config: RunConfig, skip: frozenset[str] = frozenset()) -> dict[str, object]:
    """Every config setting as ``config.<dotted key>`` (``skip``: keys a study logs
    under a headline name of its own)."""
    return {f"config.{k}": v for k, v in config.flat().items() if k not in skip}


__all__ = [
    "Begun",
    "Finished",
    "Opening",
    "Ran",
    "Resume",
    "Study",
    "config_params",
    "run_study",
]
