"""A finished Phase 5 run as Python objects: :class:`Result` and :func:`load_run`.

What a run left is read back through the suite's own readers, so a notebook sees what
the command line prints: the record (``steering_results.json``), the answer built from
it (``phase5/answer.answer_of``, with what a rescore changed first, as ``answer.md`` and
``--json`` have it) and the samples table (``samples.csv``, the rows ``steer-eval
samples`` prints, text first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from steer_eval.errors import ArgumentError

if TYPE_CHECKING:
    import pandas as pd

    from experiments.answer import Answer
    from experiments.record import RunRecord

DEFAULT_CONFIG = "configs/phase5.yaml"  # the command line's default (cli/common.DEFAULT_CONFIG)


@dataclass(eq=False)
class Result:
    """A Phase 5 run: its id and folder, its record, its answer (the typed verdicts) and
    its samples (a DataFrame, read when first asked for)."""

    run_id: str
    run_dir: Path
    record: RunRecord = field(repr=False)
    answer: Answer = field(repr=False)
    # the equivalent `steer-eval run ...` of the evaluate() call that made it (None when
    # the run was loaded: the command that made it is its MLflow tag steer_eval.command)
    command: str | None = None

    @cached_property
    def samples(self) -> pd.DataFrame:
        """Every steered text beside its unsteered and random twins, text first: the run
        folder's ``samples.csv`` as ``steer-eval samples`` reads it."""
        from experiments.phase5.samples import read_samples
        from experiments.rundir import RunDir

        return read_samples(RunDir(self.run_dir.parent, self.run_id))

    @property
    def config_hash(self) -> str:
        """The run's settings in 12 characters: equal for a call and its command line."""
        return self.record.config.config_hash()

    @property
    def url(self) -> str:
        """The run's address in the MLflow UI (opened on its answer); serve the store
        with ``steer-eval ui`` (or ``make ui``) to open it."""
        from experiments import tracking

        return tracking.run_ui_url(self.run_id)

    def answer_markdown(self) -> str:
        """The answer block as ``answer.md`` writes it (question, headlines, verdicts)."""
        from experiments.answer import END_MARK, answer_markdown

        return answer_markdown(self.answer).removesuffix(END_MARK).rstrip() + "\n"

    def _repr_markdown_(self) -> str:  # Jupyter shows the answer
        return self.answer_markdown()


def result_of(run_id: str, run_dir: Path, record: RunRecord, command: str | None) -> Result:
    """A run's :class:`Result`, its answer as ``steer-eval run`` prints it."""
    from experiments.kernel.publisher import rescore_noted
    from experiments.phase5.answer import answer_of
    from experiments.rundir import RunDir

    folder = RunDir(run_dir.parent, run_id)
    return Result(run_id, run_dir, record, rescore_noted(folder, answer_of(record)), command)


def load_run(
    run: str = "latest",
    *,
    results_dir: str | Path | None = None,
    experiment: str | None = None,
    config: str | Path = DEFAULT_CONFIG,
) -> Result:
    """A finished Phase 5 run by its id, or ``latest``: the newest in ``experiment``
    (default: ``config``'s, ``phase5-semantic-steering``). ``results_dir``: where its
    folder is when not where the run says (a copied project)."""
    from experiments import tracking
    from experiments.config import load_config
    from experiments.rundir import RunDir

    if not isinstance(run, str) or not run:
        raise ArgumentError(f"run: give a Phase 5 run id or 'latest', not {run!r}")
    if run == "latest":
        if experiment is None:
            if not Path(config).exists():
                raise ArgumentError(
                    f"config: no file {config} here ({Path.cwd()}); run from the project's "
                    "root, or name the experiment: load_run('latest', experiment=...)"
                )
            experiment = load_config(config, [], "phase5").experiment
        run = tracking.latest_parent_run(experiment, "5")
    found = tracking.get_run(run)  # a LookupError naming the store when it is not there
    tags = found.data.tags
    parent = tags.get("mlflow.parentRunId")
    if parent is not None:
        raise ArgumentError(
            f"run: {run} is a child run of {parent}; load the parent: load_run({parent!r})"
        )
    if tags.get("phase") != "5":
        raise ArgumentError(
            f"run: {run} is a run of phase {tags.get('phase')!r}, not a Phase 5 run; "
            "`steer-eval runs` lists the runs with their phase"
        )
    folder = RunDir.locate(found, results_dir)
    return result_of(run, folder.path, folder.read_record(migrate=True), None)
