"""One publisher for every phase: the folder's views, the MLflow mirror, the record.

A run's outputs are a projection of its typed record. :func:`publish` writes, in this
order:

1. the views: ``answer.md`` and ``criteria.csv`` from the record's :class:`Answer`
   (the same for every phase), the summary, the phase's other text files and figures,
   each written atomically;
2. the MLflow mirror of the parent run: parameters (new ones only), metrics (series at
   MLflow steps too), tags, the
   description (the answer first, so the run page opens on it), the experiment's
   description (the latest answer, linked), the figures and files as artefacts, tables;
3. the child runs, each once (a re-publish skips the children already logged);
4. last, the record (JSON, atomically, and as an artefact), once, with the time of
   every stage before it, publishing included: a folder whose record is there was
   published whole; a crash before leaves the earlier record (or none), and the resume
   that publishes again completes it.

A phase keeps only what is its own: its views (:class:`Views`) and its child runs
(:class:`ChildRun`, or a :class:`ChildWriter` for Phase 5's incremental per-cell
children). Parts B and C add their child to a finished run through
:func:`update_child` (a :class:`ChildUpdate`), never by writing MLflow themselves; Phase 5's GenAI
evaluation run, named by one stage and closed by a later one, is opened by
:func:`open_child` and closed by :func:`close_child`. Outside ``experiments/kernel/``
(and the wrappers in ``experiments/tracking/``) no module opens or closes a run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel

from experiments import tracking
from experiments.answer import Answer, answer_line, answer_markdown, criteria_csv, verdict_tags
from experiments.rundir import RunDir, atomic_write_text, rescored_note
from experiments.timer import Timer
from experiments.tracking.context import MAX_TAG_LEN
from experiments.tracking.listing import ANSWER_NOTE_TAG

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

R = TypeVar("R", bound=BaseModel)

# A child run's figure, drawn only when the child is logged (a re-publish skips it).
FigureFactory = Callable[[], Any]


class Target(Protocol):
    """Where a run publishes: its MLflow run and its folder (a ``RunSession`` is one)."""

    run_id: str | None
    run_dir: RunDir | None


@dataclass
class ChildRun:
    """One child run of the parent: logged once, identified by ``tags[key_tag]``."""

    key_tag: str  # the tag whose value tells this child apart from its siblings
    name: str
    tags: dict[str, str]
    params: dict[str, object] = field(default_factory=dict)
    metrics: dict[str, float | None] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # artefact name -> table
    texts: dict[str, str] = field(default_factory=dict)  # artefact name -> text
    figures: dict[str, FigureFactory] = field(default_factory=dict)  # artefact -> figure


@dataclass(frozen=True)
class ChildWriter:
    """Child runs a phase writes itself, given the parent's id: Phase 5's per-cell
    children, which a resume fills in and a rescore updates in place."""

    write: Callable[[str], object]


# A study's child runs: each logged once by the publisher, or written by the phase.
Children = Sequence[ChildRun] | ChildWriter


@dataclass
class Views:
    """What a phase shows of its record: the answer, the summary, other files, figures,
    and the MLflow projections (metrics, tags, parameters, tables)."""

    answer: Answer
    summary: str
    files: dict[str, str] = field(default_factory=dict)  # run-folder name -> text
    figures: dict[str, Figure] = field(default_factory=dict)  # file name -> drawn figure
    metrics: dict[str, float | None] = field(default_factory=dict)
    # metrics at MLflow steps, (step, metrics) each: a series a chart draws (the strength
    # sweep's measures per β, step = the β's place in its grid)
    steps: Sequence[tuple[int, dict[str, float | None]]] = ()
    tags: dict[str, str] = field(default_factory=dict)
    params: Mapping[str, object] = field(default_factory=dict)  # logged when new
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # MLflow table name -> rows
    artefacts: Sequence[str] = ()  # run-folder files mirrored when they exist
    folders: dict[str, Path] = field(default_factory=dict)  # artefact path -> folder mirrored
    note_header: str = ""  # between the answer and the summary in the description
    note_whole: str = RunDir.SUMMARY  # the artefact holding a description cut for length
    experiment: str = ""  # the experiment whose description leads with this answer
    also_note: Sequence[str] = ()  # other experiments that lead with it, when they exist


def save_figure(path: os.PathLike[str] | str, fig: Any) -> None:
    """A figure written atomically (a reader or a crash never sees half a PNG)."""
    import matplotlib.pyplot as plt

    path = os.fspath(path)
    head, name = os.path.split(path)
    partial = os.path.join(head, f".{name}.tmp.png")
    fig.savefig(partial, dpi=110)
    os.replace(partial, path)
    plt.close(fig)


def rescore_noted(run_dir: RunDir, answer: Answer) -> Answer:
    """``answer`` with, first among its notes, what a rescore changed (its verdicts come
    from those settings: ``RunDir.rescore_changes``); as it is for a run never rescored
    with a change. Every ``answer.md`` (the folder's and MLflow's) passes through it."""
    changes = run_dir.rescore_changes()
    note = rescored_note(changes) if changes else None
    if note is None or note in answer.notes:
        return answer
    return replace(answer, notes=[note, *answer.notes])


def write_answer(run_dir: RunDir, answer: Answer) -> str:
    """``criteria.csv`` and ``answer.md`` of any phase (atomically); returns the answer's
    markdown. Phase 5's Parts B and C call it again when criterion 4 changes."""
    answer = rescore_noted(run_dir, answer)
    atomic_write_text(run_dir.file(RunDir.CRITERIA), criteria_csv(answer))
    text = answer_markdown(answer)
    atomic_write_text(run_dir.file(RunDir.ANSWER), text)
    return text


def write_views(run_dir: RunDir, views: Views) -> str:
    """The folder's views from the record; returns the answer's markdown."""
    for name, fig in views.figures.items():
        save_figure(run_dir.file(name), fig)
    atomic_write_text(run_dir.file(RunDir.SUMMARY), views.summary)
    for name, text in views.files.items():
        atomic_write_text(run_dir.file(name), text)
    return write_answer(run_dir, views.answer)


def publish(
    target: Target,
    record: R,
    views: Callable[[R], Views],
    children: Callable[[R], Children] = lambda _record: (),
    record_file: str = RunDir.RECORD,
    timer: Timer | None = None,
) -> R:
    """Write the views, mirror them to MLflow, log the child runs, then write the record
    once (see the module); returns the record as written. ``views`` and ``children``
    are drawn from the record once its timings hold every stage before publishing.
    ``timer`` times the parts as stages ``figures`` (drawing the views), ``views`` (the
    folder's files), ``mlflow_parent`` and ``child_runs``; the record's ``timings`` then
    hold them all, and the parent run gets them as ``time/<stage>``."""
    run_id, run_dir = target.run_id, target.run_dir
    assert run_id is not None and run_dir is not None, "publish after session.start()"
    stage = (timer or Timer()).time  # untimed: a timer nobody reads
    record = _settled(record, timer)
    with stage("figures"):
        shown = views(record)
    with stage("views"):
        write_views(run_dir, shown)
    with stage("mlflow_parent"):
        mirror(run_id, run_dir, shown)
    with stage("child_runs"):
        logged = children(record)
        if isinstance(logged, ChildWriter):
            logged.write(run_id)
        else:
            log_children(run_id, shown.experiment, logged)
    record = _settled(record, timer)
    atomic_write_text(run_dir.file(record_file), record.model_dump_json(indent=1))
    tracking.client().log_artifact(run_id, str(run_dir.file(record_file)))
    if timer is not None:
        timings = getattr(record, "timings", None) or dict(timer.stages)
        tracking.log_metrics(run_id, {f"time/{k}": v for k, v in timings.items()})
    return record


def _settled(record: R, timer: Timer | None) -> R:
    """The record with every stage timed so far (a record without ``timings`` as is)."""
    timings = getattr(record, "timings", None)
    if timer is None or not isinstance(timings, dict):
        return record
    return record.model_copy(update={"timings": {**timings, **timer.stages}})


def mirror(run_id: str, run_dir: RunDir, views: Views) -> None:
    """The parent MLflow run as a mirror of the folder (``answer.md`` with its figures
    linked to the run's artefacts: :func:`log_answer`)."""
    c = tracking.client()
    if views.params:
        tracking.log_new_params(run_id, views.params)
    # each verdict as a formatted cell (status, value [low, high]) first: the runs
    # table's columns read them; the answer's first note (what a run without verdicts,
    # a strength sweep, answered: `steer-eval runs` shows it); the phase's own tags after
    notes = views.answer.notes
    note = {ANSWER_NOTE_TAG: notes[0][:MAX_TAG_LEN]} if notes else {}
    tracking.set_tags(run_id, {**verdict_tags(views.answer), **note, **views.tags})
    shown = log_answer(run_id, views.answer)
    tracking.set_note(
        run_id, shown + "\n" + views.note_header + views.summary, whole=views.note_whole
    )
    if views.experiment:
        note_latest(run_id, views)
    for name in views.figures:
        c.log_artifact(run_id, str(run_dir.file(name)), PLOTS)
    for name in (RunDir.SUMMARY, RunDir.CRITERIA, *views.artefacts):
        if run_dir.file(name).exists():
            c.log_artifact(run_id, str(run_dir.file(name)))
    for name, folder in views.folders.items():
        c.log_artifacts(run_id, str(folder), name)
    for name, frame in views.tables.items():
        tracking.overwrite_table(run_id, frame, name)
    tracking.log_metrics(run_id, views.metrics)
    for step, metrics in views.steps:
        tracking.log_metrics(run_id, metrics, step=step)


# Where the mirror logs a run's figures among its artefacts.
PLOTS = "plots"


def log_answer(run_id: str, answer: Answer) -> str:
    """``answer.md`` as MLflow shows it (artefact and description): the folder's text
    with each figure linked to the run's ``plots/`` artefact in the UI, where a link
    relative to the file would open nothing. Returns that text."""
    import tempfile

    run = tracking.get_run(run_id)
    experiment_id = run.info.experiment_id
    answer = rescore_noted(RunDir.locate(run), answer)
    text = answer_markdown(
        answer, lambda name: tracking.ui_path(experiment_id, run_id, artifact=f"{PLOTS}/{name}")
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, RunDir.ANSWER)
        atomic_write_text(Path(path), text)
        tracking.client().log_artifact(run_id, path)
    return text


def note_latest(run_id: str, views: Views) -> None:
    """The experiment's description leads with this run's answer and links it, so the
    experiment's runs page shows the latest answer without a click."""
    run = tracking.get_run(run_id)
    link = tracking.ui_path(run.info.experiment_id, run_id, artifact=RunDir.ANSWER)
    line = answer_line(views.answer, run.info.run_name or run_id, link)
    tracking.set_experiment_note(views.experiment, line)
    for other in views.also_note:
        if tracking.client().get_experiment_by_name(other) is not None:
            tracking.set_experiment_note(other, line)


def log_children(run_id: str, experiment: str, children: Sequence[ChildRun]) -> int:
    """Each child run once: those already under the parent (by their key tag) are kept."""
    if not children:
        return 0
    import matplotlib.pyplot as plt

    c = tracking.client()
    logged = [r.data.tags for r in tracking.child_runs(run_id, experiment)]
    done = {
        (key, tags[key])
        for key in {ch.key_tag for ch in children}
        for tags in logged
        if key in tags
    }
    n = 0
    for child in children:
        if (child.key_tag, child.tags[child.key_tag]) in done:
            continue
        with child_run(run_id, experiment, child.name, child.tags) as child_id:
            if child.params:
                tracking.log_params(child_id, child.params)
            tracking.log_metrics(child_id, child.metrics)
            for name, frame in child.tables.items():
                c.log_table(child_id, frame, name)
            for name, text in child.texts.items():
                c.log_text(child_id, text, name)
            for name, factory in child.figures.items():
                fig = factory()
                c.log_figure(child_id, fig, name)
                plt.close(fig)
        n += 1
    return n


@contextmanager
def child_run(
    parent_run_id: str,
    experiment: str,
    name: str,
    tags: dict[str, str],
    run_id: str | None = None,
) -> Iterator[str]:
    """A child of ``parent_run_id``, made (or reopened: ``run_id``) and always closed,
    FINISHED, KILLED on Ctrl-C or FAILED: where every child run is opened."""
    with tracking.tracked_run(
        experiment, name, parent_run_id=parent_run_id, tags=tags, run_id=run_id
    ) as child:
        yield child


@contextmanager
def append_child(
    parent_run_id: str,
    experiment: str,
    phase: str,
    name: str,
    found: str | None,
    count_tag: str | None = None,
) -> Iterator[tuple[str, int]]:
    """Parts B and C adding to a finished run: their child of ``phase`` (``found``, the
    one already there, reopened; else made under the parent), yielding (its id, which
    addition this is: 1 for the first). ``count_tag``: the child's tag that counts the
    additions (a rerun of the panel, another import of ratings), set here."""
    count = 1
    if found is not None and count_tag is not None:
        count = int(tracking.get_run(found).data.tags.get(count_tag, "0")) + 1
    with child_run(parent_run_id, experiment, name, {"phase": phase}, run_id=found) as child:
        if count_tag is not None:
            tracking.client().set_tag(child, count_tag, str(count))
        yield child, count


@dataclass
class ChildUpdate:
    """What Parts B and C write to their child of a finished run on each addition (a
    rerun of the panel, another import of ratings): the publisher logs it, so neither
    writes MLflow by hand. Figures are logged, not closed (their caller may save them)."""

    tags: dict[str, str] = field(default_factory=dict)
    first_params: dict[str, object] = field(default_factory=dict)  # the first addition's
    params: dict[str, object] = field(default_factory=dict)  # logged where not there yet
    metrics: Mapping[str, float | None] = field(default_factory=dict)  # at the addition's step
    prompts: Sequence[str] = ()  # registered prompt URIs the child links
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # MLflow table, replaced
    figures: dict[str, Figure] = field(default_factory=dict)  # artefact path -> drawn figure
    files: dict[str, str] = field(default_factory=dict)  # artefact name -> text
    after: Callable[[str], object] | None = None  # anything else, given the child's id
    note: str = ""
    note_whole: str = RunDir.SUMMARY  # the artefact holding a note cut for length


def update_child(
    parent_run_id: str,
    experiment: str,
    phase: str,
    name: str,
    found: str | None,
    count_tag: str,
    build: Callable[[str, int], ChildUpdate],
) -> str:
    """Parts B and C: their child (:func:`append_child`), given what ``build`` makes of
    this addition (the child's id and the addition's number), written in one order:
    tags, parameters, metrics, prompts, tables, figures, files, ``after``, the note.
    Returns the child's id."""
    import tempfile

    with append_child(parent_run_id, experiment, phase, name, found, count_tag) as (child, n):
        update = build(child, n)
        c = tracking.client()
        for key, value in update.tags.items():
            c.set_tag(child, key, value)
        if n == 1 and update.first_params:
            tracking.log_params(child, update.first_params)
        tracking.log_metrics(child, update.metrics, step=n)
        if update.params:
            tracking.log_new_params(child, update.params)
        for uri in update.prompts:
            c.link_prompt_version_to_run(child, uri)
        for table_name, table in update.tables.items():
            tracking.overwrite_table(child, table, table_name)
        for path, fig in update.figures.items():
            c.log_figure(child, fig, path)
        with tempfile.TemporaryDirectory() as tmp:
            for file_name, text in update.files.items():
                (Path(tmp) / file_name).write_text(text)
                c.log_artifact(child, str(Path(tmp) / file_name))
        if update.after is not None:
            update.after(child)
        if update.note:
            tracking.set_note(child, update.note, whole=update.note_whole)
    return child


def open_child(
    parent_run_id: str, experiment: str, name: str, tags: dict[str, str], key_tag: str
) -> str:
    """A child of ``parent_run_id`` left open across stages, until :func:`close_child`:
    the one already under the parent whose ``key_tag`` has this child's value (a resume
    finds it, left as it was), else made (RUNNING, named ``name``, tagged ``tags``).
    Phase 5's GenAI evaluation run: its traces' feedback names it in one stage, a later
    stage links them to it and closes it."""
    for run in tracking.child_runs(parent_run_id, experiment):
        if run.data.tags.get(key_tag) == tags[key_tag]:
            found: str = run.info.run_id
            return found
    return tracking.start_run(experiment, name, tags=tags, parent_run_id=parent_run_id)


def close_child(run_id: str, status: str = "FINISHED") -> None:
    """End a child run left open (:func:`open_child`, or one a killed run left
    unfinished): ``status`` FINISHED, FAILED or KILLED."""
    tracking.end_run(run_id, status)
