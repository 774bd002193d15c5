"""The run folder: every path under ``<results_dir>/<run id>/`` and how to read it.

One object owns the layout, so Phase 5, rescoring, human validation, the panel and
the calibration study never spell a file name themselves. Generations (model output)
and scores (everything computed from the text) live in separate JSONL files, so
``steer-eval rescore`` can recompute every metric without a model forward pass.
JSONL appends are fsynced per batch; a torn last line from a crash is skipped on read
(by line number) and cut off before the next append.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steering.files import temp_beside

if TYPE_CHECKING:
    from mlflow.entities import Run

    from experiments.config import Phase, RunConfig
    from experiments.record import RunRecord

log = logging.getLogger(__name__)

DEFAULT_RESULTS_DIR = "results/phase5"
RESULTS_ROOT = "results"  # every phase's results folder lies under it (tracking.results_dir)
# The parent run's tag that remembers where its folder is (so resume never guesses).
RUN_DIR_TAG = "steer_eval.run_dir"


# ------------------------------------------------ CSV cells a spreadsheet opens safely
# A spreadsheet reads a cell whose first character is one of these as a formula (OWASP's
# CSV injection guidance: = + - @, tab and carriage return); the full-width forms are
# included because some spreadsheets fold them. A cell that starts with a space or a line
# break is text, as a model's continuation of its prompt usually does: it is left as it is.
FORMULA_TRIGGERS = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")
# What earlier releases also prefixed (a line break first, or a trigger after blanks):
# their files are read back the same.
_EARLIER_TRIGGERS = FORMULA_TRIGGERS | {"\n"}
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def neutralise(cell: str) -> str:
    """A cell that no spreadsheet will execute: control characters replaced (NUL among
    them), and a ``'`` prefix when its first character could start a formula."""
    cell = CONTROL_CHARS.sub("\ufffd", cell)
    return "'" + cell if cell[:1] in FORMULA_TRIGGERS else cell


def restore(cell: str) -> str:
    """Undo :func:`neutralise`'s prefix (a spreadsheet may or may not have kept it),
    also as earlier releases wrote it."""
    rest = cell[1:]
    if cell.startswith("'") and (
        rest[:1] in _EARLIER_TRIGGERS or rest.lstrip()[:1] in _EARLIER_TRIGGERS
    ):
        return rest
    return cell


class RunDirError(LookupError):
    """A run's local folder or one of its files is missing; the message says what to do."""


def parse_jsonl(text: str, source: str = "a JSONL file") -> list[dict[str, Any]]:
    """Records in a JSONL text. A line that is not JSON (a torn write, an edit) is
    skipped with a warning that names its line number, never fatal: a resume repairs a
    torn last line before appending (:func:`append_jsonl`)."""
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            log.warning(
                "%s line %d is not valid JSON (%s; an interrupted write?): skipped",
                source,
                number,
                exc.msg,
            )
    return records


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return parse_jsonl(path.read_text(encoding="utf-8"), str(path)) if path.exists() else []


def repair_tail(path: Path) -> None:
    """Make ``path`` end at a line break before anything is appended to it.

    A crash in the middle of an append leaves a last line without its newline; the next
    record would be glued to it and both lost. A fragment that is a whole JSON record
    (only the newline was lost) gets its newline; anything else is cut off, with a
    warning naming its line number.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    start = data.rfind(b"\n") + 1
    fragment = data[start:]
    try:
        json.loads(fragment)
        complete = True
    except ValueError:
        complete = False
    with path.open("r+b") as handle:
        if complete:
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n")
        else:
            log.warning(
                "%s line %d is a torn write (%d bytes, no line break): removed before "
                "appending; its rows are generated again",
                path,
                data.count(b"\n", 0, start) + 1,
                len(fragment),
            )
            handle.truncate(start)
        handle.flush()
        os.fsync(handle.fileno())


def append_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append and fsync, so a finished batch survives a crash; a torn last line left by
    an earlier crash is repaired first."""
    repair_tail(path)
    with path.open("a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def plan_order(generations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Generations in the order one uninterrupted local run writes them (split, prompt
    length, key): a Ray run appends batches as they finish, and means and bootstrap
    intervals should not depend on that order."""
    split_rank = {"selection": 0, "report": 1}
    return sorted(
        generations,
        key=lambda g: (split_rank.get(g.get("split", "report"), 2), g["n_prompt_tokens"], g["key"]),
    )


def join_scores(
    generations: Iterable[dict[str, Any]], scores: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The one join of the suite: each generation with its scores (by ``key``), in the
    order given; generations without scores are left out (a run that crashed between
    generating and scoring is rescored before anything reads it)."""
    by_key = {s["key"]: s for s in scores}
    return [{**g, **by_key[g["key"]]} for g in generations if g["key"] in by_key]


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    """Write through a temporary file and rename, so a reader never sees half a file;
    the file gets the mode a plain ``open(path, "w")`` gives (``steering.files``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_beside(path, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# The runs table's column (a tag of the parent run) that says what a rescore changed.
RESCORED_TAG = "rescored with"


def rescored_with(changes: list[str]) -> str:
    """``rescored with key=new (was old); ...``: how ``runs``, the runs table and the
    answer say that a run's verdicts come from a rescore's changed settings."""
    return f"{RESCORED_TAG} {'; '.join(changes)}"


def rescored_note(changes: list[str]) -> str:
    """The answer's note on a run rescored with changed settings (:func:`rescored_with`)."""
    said = rescored_with(changes)
    return (
        f"{said[:1].upper()}{said[1:]}: the scores and verdicts come from these settings "
        f"({RunDir.RESCORED_CONFIG}); the run's own are in {RunDir.CONFIG}."
    )


def _flat_yaml(path: Path) -> dict[str, object]:
    """A YAML file's settings as dotted keys (nested mappings walked), unvalidated."""
    import yaml

    from experiments.config.base import flat_keys

    return flat_keys(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


def _setting(value: object) -> str:
    """A setting's value as ``rescored with`` shows it (YAML's spelling, ``absent``)."""
    if not isinstance(value, str | int | float | bool | list | dict | None):
        return "absent"
    return json.dumps(value) if not isinstance(value, str) else value


class RunDir:
    """``<root>/<run_id>/``: the files of one Phase 5 (or study) run."""

    CONFIG = "config.yaml"  # the config the run was made with (a rescore leaves it as it is)
    RESCORED_CONFIG = "config.rescored.yaml"  # a rescore's config, when it changed a setting
    GENERATIONS = "generations.jsonl"
    SCORES = "scores.jsonl"
    RECORD = "steering_results.json"
    SUMMARY = "summary.md"
    ANSWER = "answer.md"  # the research question and the verdicts (phase5/answer.py)
    CRITERIA = "criteria.csv"
    SAMPLES = "samples.csv"  # each steered text beside its twins (phase5/samples.py)
    AXBENCH = "axbench_scores.csv"  # panel --rubric axbench per concept × sign
    AXBENCH_IDENTIFY = "axbench_identify.json"  # ... on an identify run: rubric reliability
    CENTROIDS = "centroid_texts.json"
    CRITERION4 = "criterion4.json"
    TRACES = "traces.json"  # generation key -> MLflow trace id
    SELECTION = "selection.json"  # held-out β per concept (Phase 6: per probe set)
    LAYER_CHOICE = "layer_choice.json"  # --layer auto / auto-effect: the rule and its table
    LIKELIHOOD = "likelihood.jsonl"  # the likelihood outcome per direction × strength × pair
    LIKELIHOOD_TEXTS = "likelihood_texts.json"  # its texts, also Δ's reference texts
    HUMAN = "human"
    # Phase 6 (calibration study) folders also hold:
    PROBE_SETS = "probe_sets.json"  # per probe set and concept, the detection predictors
    CURVE = "curve.csv"  # one row per probe set × concept: predictors, β, effect
    CLASSIFIERS = "classifiers.json"  # Phase 4's record (kernel/classifiers.py)
    ANALYSIS = "analysis.json"  # slopes, minimum effective levels
    STRENGTH = "strength.json"  # β and held-out grid per layer and source, and their origin
    # Phase 6 that identifies (steer-eval identify) folders also hold (ANALYSIS too):
    CONCEPT_SPLIT = "concept_split.json"  # development / held-out concepts, this run's set
    PREREGISTRATION = "preregistration.md"  # the pre-registration the run was scored under
    DIRECTIONS = "directions.csv"  # one row per concept × direction: predictors, outcome
    PROMPT_BASELINE = "prompt_baseline.jsonl"  # the prompting baseline per strength × pair
    VALIDATION_CELLS = "validation_cells.csv"  # generated-text effect per concept × direction
    PHASE6_CURVE = "phase6_curve.csv"  # a Phase 6 run's curve, directions re-scored
    SUBSET = "subset.json"  # identify v2's stratified subset of concepts
    NAME_FREE = "likelihood_name_free.jsonl"  # the subset's outcome on name-free texts
    NAME_FREE_TEXTS = "likelihood_name_free_texts.json"  # those texts and their pairs
    DOSE = "dose.jsonl"  # the subset's likelihood outcome at fixed and KL-matched doses
    # A strength sweep's folder (steer-eval calibrate-strength) holds, beside its record
    # strength_range.json (also kept with the classifiers), its figure and tables:
    SWEEP_TEXTS = "sweep_texts.jsonl"  # every text, appended per batch: a stopped sweep resumes

    def __init__(self, root: str | Path, run_id: str) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.path = self.root / run_id

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ------------------------------------------------------------------ locating

    @classmethod
    def locate(cls, run: Run, results_dir: str | Path | None = None) -> RunDir:
        """The folder of an MLflow run: explicit root, else the run's own tag (or, when
        that folder is not on this machine, the run's folder found again under
        ``./results/``: :meth:`found_again`, with a line saying which was read), else its
        config's ``tracking.results_dir``, else the default."""
        run_id = run.info.run_id
        if results_dir is not None:
            return cls(results_dir, run_id)
        tagged = run.data.tags.get(RUN_DIR_TAG)
        if tagged:
            path = Path(tagged)
            if not path.is_dir():
                again = cls.found_again(run_id)
                if again is not None:
                    log.warning(
                        "run %s: its folder %s is not on this machine; reading %s (found "
                        "under ./%s)", run_id, path, again.path, RESULTS_ROOT,
                    )  # fmt: skip
                    return again
            return cls(path.parent, run_id)
        root = run.data.params.get("config.tracking.results_dir")
        if root is None:
            root = run.data.params.get("results_dir", DEFAULT_RESULTS_DIR)
        return cls(root, run_id)

    @classmethod
    def found_again(cls, run_id: str, root: str | Path = RESULTS_ROOT) -> RunDir | None:
        """A run's folder under ``root`` (``results/``, where every phase keeps its runs:
        ``results/<phase>/<run id>``, or one folder deeper), when exactly one is there."""
        base = Path(root)
        found = [p for p in (*base.glob(f"*/{run_id}"), *base.glob(f"*/*/{run_id}")) if p.is_dir()]
        return cls(found[0].parent, run_id) if len(found) == 1 else None

    def exists(self) -> bool:
        return self.path.is_dir()

    def create(self) -> RunDir:
        """Make the folder; temporary files of an atomic write that a crash interrupted
        (``.<name>.*.tmp``) are removed, since their file is written again."""
        self.path.mkdir(parents=True, exist_ok=True)
        for stale in self.path.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
        return self

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def human(self) -> Path:
        return self.path / self.HUMAN

    # ------------------------------------------------------------------ config

    def write_config(self, config: RunConfig, name: str = CONFIG) -> None:
        from experiments.config import dump_config

        atomic_write_text(self.file(name), dump_config(config))

    def scoring_config_file(self) -> Path:
        """The config the run's scores and verdicts come from: a rescore's
        ``config.rescored.yaml`` when one changed a setting, else ``config.yaml``."""
        rescored = self.file(self.RESCORED_CONFIG)
        return rescored if rescored.exists() else self.file(self.CONFIG)

    def write_rescored_config(self, config: RunConfig) -> list[str]:
        """Keep a rescore's ``config`` beside the run's own: ``config.rescored.yaml``
        when it differs from ``config.yaml`` in any setting (removed when it no longer
        does); ``config.yaml`` is never rewritten. Returns :meth:`rescore_changes`."""
        path = self.file(self.RESCORED_CONFIG)
        self.write_config(config, path.name)
        changes = self.rescore_changes(config.phase)
        if not changes:
            path.unlink(missing_ok=True)
        return changes

    def rescore_changes(self, phase: Phase | None = None) -> list[str]:
        """What a rescore changed, one ``key=new (was old)`` per setting, dotted keys in
        order: ``config.rescored.yaml`` against ``config.yaml``, both read as configs
        (so an older release's layout of the same settings is no change); none when the
        run was never rescored with a change."""
        from experiments.config import ConfigError, load_config

        rescored = self.file(self.RESCORED_CONFIG)
        if not rescored.exists():
            return []
        try:
            before = load_config(self.file(self.CONFIG), phase=phase).flat()
            after = load_config(rescored, phase=phase).flat()
        except ConfigError:  # not valid here (a vector file elsewhere): the files' own keys
            before, after = _flat_yaml(self.file(self.CONFIG)), _flat_yaml(rescored)
            before = {k: v for k, v in before.items() if k in after}
            after = {k: v for k, v in after.items() if k in before}
        missing = object()
        return [
            f"{key}={_setting(after.get(key, missing))} (was {_setting(before.get(key, missing))})"
            for key in sorted(before.keys() | after.keys())
            if before.get(key, missing) != after.get(key, missing)
        ]

    def load_config(self, phase: Phase | None = None) -> RunConfig:
        """The run's ``config.yaml``, read as ``phase`` when it names none (an older run)."""
        from experiments.config import load_config

        path = self.file(self.CONFIG)
        if not path.exists():
            raise RunDirError(
                f"run {self.run_id} has no local results under {self.path}; it cannot be "
                "resumed or rescored from this machine (pass --results-dir if it lives elsewhere)"
            )
        return load_config(path, phase=phase)

    # ------------------------------------------------------------------ JSONL stores

    def read_generations(self) -> list[dict[str, Any]]:
        return read_jsonl(self.file(self.GENERATIONS))

    def append_generations(self, records: Iterable[dict[str, Any]]) -> None:
        append_jsonl(self.file(self.GENERATIONS), records)

    def read_likelihood(self) -> list[dict[str, Any]]:
        return read_jsonl(self.file(self.LIKELIHOOD))

    def append_likelihood(self, records: Iterable[dict[str, Any]]) -> None:
        append_jsonl(self.file(self.LIKELIHOOD), records)

    def read_scores(self) -> list[dict[str, Any]]:
        return read_jsonl(self.file(self.SCORES))

    def write_scores(self, records: Iterable[dict[str, Any]]) -> None:
        """Scores are derived data: rewritten whole (atomically) on every scoring pass."""
        atomic_write_text(self.file(self.SCORES), "".join(json.dumps(r) + "\n" for r in records))

    def read_scored(self, in_plan_order: bool = False) -> list[dict[str, Any]]:
        """Each generation joined with its scores (:func:`join_scores`), in the file's
        order or in plan order (what the analysis reads: independent of how a Ray run's
        batches came back)."""
        generations = self.read_generations()
        if in_plan_order:
            generations = plan_order(generations)
        return join_scores(generations, self.read_scores())

    # ------------------------------------------------------------------ record

    def write_record(self, record: RunRecord) -> Path:
        path = self.file(self.RECORD)
        atomic_write_text(path, record.model_dump_json(indent=1))
        return path

    def read_record(self, migrate: bool = False) -> RunRecord:
        from experiments.record import RunRecord

        path = self.file(self.RECORD)
        if not path.exists():
            raise RunDirError(
                f"run {self.run_id} has no {self.RECORD} under {self.path}; is it a finished run?"
            )
        return RunRecord.parse(path.read_text(encoding="utf-8"), str(path), migrate=migrate)

    def write_json(self, name: str, data: object) -> Path:
        path = self.file(name)
        atomic_write_text(path, json.dumps(data, indent=1, default=str) + "\n")
        return path
