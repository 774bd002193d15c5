"""Export a blind rating sample from a finished Phase 5 run, and find an export again.

The export lives in ``<run folder>/human/`` and is logged as artefacts ``human/`` of the
parent run, so rating and import work on another machine too (:func:`fetch_export`,
:func:`answer_key_for`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments import tracking
from experiments.rundir import RunDir, atomic_write_text
from experiments.validation.errors import ValidationInputError
from experiments.validation.human.answer_key import (
    KEY_NAME,
    build_answer_key,
    load_answer_key,
    parse_answer_key,
)
from experiments.validation.human.csvio import (
    CSV_COLUMNS,
    CSV_NAME,
    RATINGS_NAME,
    REDACTED,
    write_csv,
)
from experiments.validation.human.sample import stratified_sample
from experiments.validation.runs import Phase5Run, cell_key, phase5_parent

ARTIFACT_DIR = RunDir.HUMAN  # artefacts mirror the run folder's human/
DEFAULT_N = 50


@dataclass
class ExportResult:
    run_id: str
    csv_path: Path
    key_path: Path
    n: int
    cells: dict[str, int]
    warnings: list[str] = field(default_factory=list)


def export_samples(
    run_id: str,
    n: int = DEFAULT_N,
    seed: int = 0,
    out: str | Path | None = None,
    results_dir: str | Path | None = None,
    force: bool = False,
    experiment: str | None = None,
) -> ExportResult:
    """Draw, blind and write the rating sample; log CSV and key under ``human/`` on the run.

    ``run_id`` may be ``latest`` (the newest finished run in ``experiment``).
    """
    if n < 1:
        raise ValidationInputError(f"--n must be at least 1, got {n}")
    parent = phase5_parent(run_id, experiment, results_dir)
    run_id = parent.run_id  # "latest" resolved
    records = parent.scored_generations()
    children = parent.cell_runs()
    missing = sorted({cell_key(r.concept, r.strength) for r in records} - set(children))
    if missing:
        raise ValidationInputError(
            f"run {run_id} has no child run for cell(s) {missing[:5]}; is the run complete?"
        )
    warnings = []
    if n > len(records):
        warnings.append(f"the run has only {len(records)} generations; exporting all of them")
    samples = stratified_sample(records, n, seed)
    key = build_answer_key(run_id, samples, children, parent.concept_lemmas(), seed, n)
    folder = Path(out) if out is not None else parent.folder.human
    key_path, csv_path = folder / KEY_NAME, folder / CSV_NAME
    if key_path.exists() and not force:
        try:
            old = json.loads(key_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        if old.get("key_hash") != key["key_hash"]:
            raise ValidationInputError(
                f"{folder} already holds a different export (ratings may be in progress); "
                "pass --force to replace it, or --out elsewhere"
            )
    if key_path.exists() and (folder / RATINGS_NAME).exists():
        old_hash = json.loads(key_path.read_text(encoding="utf-8")).get("key_hash", "old")
        if old_hash != key["key_hash"]:
            kept = folder / f"human_ratings.{str(old_hash)[:12]}.csv"
            os.replace(folder / RATINGS_NAME, kept)
            warnings.append(f"ratings of the replaced export were kept as {kept}")
    rows = [
        {
            "sample_id": entry["sample_id"],
            "concept": REDACTED,
            "generated_text": record.text,
            "human_rating": "",
        }
        for entry, record in zip(key["samples"], samples, strict=True)
    ]
    write_csv(csv_path, CSV_COLUMNS, rows)
    atomic_write_text(key_path, json.dumps(key, indent=1, ensure_ascii=False) + "\n")
    c = tracking.client()
    c.log_artifact(run_id, str(csv_path), ARTIFACT_DIR)
    c.log_artifact(run_id, str(key_path), ARTIFACT_DIR)
    c.set_tag(run_id, "human.export", f"n={key['n']} seed={seed} key={key['key_hash'][:12]}")
    return ExportResult(run_id, csv_path, key_path, key["n"], key["stratification"], warnings)


def no_export(run_id: str) -> ValidationInputError:
    return ValidationInputError(
        f"run {run_id} has no human-validation export; run "
        f"`steer-eval human export --run {run_id}` first"
    )


def fetch_export(parent: Phase5Run) -> Path:
    """The local folder holding the run's export, restored from MLflow when absent here."""
    folder = parent.folder.human
    if (folder / KEY_NAME).exists() and (folder / CSV_NAME).exists():
        return folder
    csv_bytes = parent.artifact_bytes(f"{ARTIFACT_DIR}/{CSV_NAME}")
    key_bytes = parent.artifact_bytes(f"{ARTIFACT_DIR}/{KEY_NAME}")
    if csv_bytes is None or key_bytes is None:
        raise no_export(parent.run_id)
    parse_answer_key(key_bytes, f"{ARTIFACT_DIR}/{KEY_NAME}", parent.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in ((CSV_NAME, csv_bytes), (KEY_NAME, key_bytes)):
        if not (folder / name).exists():
            (folder / name).write_bytes(content)
    return folder


def answer_key_for(
    parent: Phase5Run, csv_path: Path, key_path: Path | None = None
) -> dict[str, Any]:
    """The verified key: explicit, else beside the CSV, else the local export, else MLflow."""
    run_id = parent.run_id
    if key_path is not None:
        return load_answer_key(Path(key_path), run_id)
    for candidate in (Path(csv_path).parent / KEY_NAME, parent.folder.human / KEY_NAME):
        if candidate.is_file():
            return load_answer_key(candidate, run_id)
    data = parent.artifact_bytes(f"{ARTIFACT_DIR}/{KEY_NAME}")
    if data is None:
        raise no_export(run_id)
    return parse_answer_key(data, f"MLflow artefact {ARTIFACT_DIR}/{KEY_NAME}", run_id)
