"""Synthetic finished Phase 5 runs in a real MLflow store, and CSV helpers for Parts B/C.

Test modules reach the helpers through the ``kit`` fixture (a conftest cannot be
imported), e.g. ``kit.read_export(path)``.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from experiments import tracking
from experiments.concepts import DEFAULT_PATH
from experiments.config import load_config
from experiments.rundir import RunDir
from experiments.validation.human.answer_key import key_samples, load_answer_key
from experiments.validation.human.export import ExportResult, export_samples
from experiments.validation.runs import phase5_parent
from metrics.stats import pearson

CONCEPTS = [
    ("person.n.01", "person"),
    ("change.v.01", "change"),
    ("bird_genus.n.01", "bird genus"),
    ("herb.n.01", "herb"),
]
STRENGTHS = [-1.0, 0.0, 1.0]
PAYLOADS = [
    '=HYPERLINK("http://evil.example","click")',
    "+1+1 plus",
    "-2+3 minus",
    "@SUM(A1:A2)",
    "\tTAB first",
    "\rCR first",
    "   =1+2 after spaces",
    "＝1+1 full width",
    'a comma, a "quote" and\na newline',
    "plain words",
    "[bold]markup[/bold] stays literal",
    "escape \x1b[31m red",
]
EXPERIMENT = "human-test"


def synthetic_records(seed: int = 0) -> list[dict]:
    """4 concepts × 3 strengths × 3 prompts × 2 samples, Δ rising with strength."""
    rng = np.random.default_rng(seed)
    records, i = [], 0
    for ci, (synset, name) in enumerate(CONCEPTS):
        for s in STRENGTHS:
            for p in range(3):
                for n in range(2):
                    records.append(
                        {
                            "key": f"{synset}|p{p}|n{n}|s{s:+.3f}",
                            "concept": synset,
                            "concept_name": name,
                            "prompt_index": p,
                            "prompt": f"Tell me about {name}." if p == 0 else "Here is a story:",
                            "sample": n,
                            "strength": s,
                            "seed": 1,
                            "text": f"{PAYLOADS[i % len(PAYLOADS)]} #{i}-{seed}",
                            "delta": float(0.12 * s + 0.03 * ci + rng.normal(0, 0.04)),
                        }
                    )
                    i += 1
    return records


def run_config(results: Path, overrides: list[str] | None = None):
    """The config a synthetic run was 'made with' (stored as its config.yaml)."""
    return load_config(
        None,
        [
            f"tracking.experiment={EXPERIMENT}",
            f"tracking.results_dir={results}",
            f"concepts.file={DEFAULT_PATH}",
            *(overrides or []),
        ],
    )


def make_run(
    root: Path,
    records: list[dict] | None = None,
    config_overrides: list[str] | None = None,
    local: bool = True,
) -> tuple[str, list[dict]]:
    """A finished Phase 5 parent with one child per cell and an old-style run folder:
    config.yaml and a generations.jsonl that holds Δ (no scores.jsonl, no run record).

    The parameters mimic what Phase 5 logs; the thresholds in them are deliberately not
    what Parts B and C read. ``local=False`` logs the folder's files as MLflow artefacts
    and removes the folder, as on a machine other than the one that ran Phase 5.
    """
    records = records if records is not None else synthetic_records()
    results = root / "res"
    run_id = tracking.start_run(EXPERIMENT, "phase5 synthetic", tags={"phase": "5"})
    tracking.log_params(
        run_id,
        {
            "config.tracking.results_dir": str(results),
            "config.concepts.file": str(DEFAULT_PATH),
            "config.criteria.human_r_pass": 0.7,
            "config.criteria.human_r_panel": 0.5,
        },
    )
    c = tracking.client()
    exp = tracking.experiment_id(EXPERIMENT)
    for synset, s in sorted({(r["concept"], r["strength"]) for r in records}):
        child = c.create_run(
            exp,
            run_name=f"{synset} {s:+g}",
            tags={"mlflow.parentRunId": run_id, "cell": f"{synset}|{s:+.3f}", "phase": "5"},
        )
        c.set_terminated(child.info.run_id)
    folder = RunDir(results, run_id).create()
    folder.write_config(run_config(results, config_overrides))
    folder.file(RunDir.GENERATIONS).write_text("".join(json.dumps(r) + "\n" for r in records))
    if not local:
        for name in (RunDir.CONFIG, RunDir.GENERATIONS):
            c.log_artifact(run_id, str(folder.file(name)))
            folder.file(name).unlink()
        folder.path.rmdir()
    tracking.end_run(run_id)
    return run_id, records


def read_export(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def write_rated(path: Path, rows: list[dict[str, str]], columns=None) -> Path:
    """What a spreadsheet saves: plain csv module output, minimal quoting."""
    columns = columns or list(rows[0])
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def rated_rows(export_csv: Path, key: dict, rate) -> list[dict[str, str]]:
    """The export with human_rating filled by ``rate(answer key entry)`` (None = blank)."""
    samples = key_samples(key)
    rows = read_export(export_csv)
    for row in rows:
        value = rate(samples[row["sample_id"]])
        row["human_rating"] = "" if value is None else str(value)
    return rows


def human_children(run_id: str) -> list:
    return phase5_parent(run_id).children(" and tags.phase = '5B'")


def snapshot(run_id: str, folder: Path) -> tuple:
    """Everything an import may change: children, parent tags/metrics, local files."""
    run = tracking.get_run(run_id)
    files = {str(p): p.read_bytes() for p in sorted(folder.parent.rglob("*")) if p.is_file()}
    return (
        len(phase5_parent(run_id).children()),
        dict(run.data.tags),
        dict(run.data.metrics),
        files,
    )


def ratings_with_r(key: dict, low: float, high: float) -> dict[str, int]:
    """Integer ratings whose Pearson r with Δ falls in [low, high] (test data only)."""
    rng = np.random.default_rng(0)
    samples = key["samples"]
    delta = np.array([s["delta"] for s in samples])
    z = (delta - delta.mean()) / delta.std()
    noise = rng.normal(size=len(z))
    for w in np.linspace(0, 10, 1001):
        ratings = np.clip(np.round(5 + 1.5 * (z + w * noise)), 0, 10).astype(int)
        r = pearson(ratings.astype(float), delta)
        if r.evaluable and low <= r.r <= high:
            return {s["sample_id"]: int(v) for s, v in zip(samples, ratings, strict=True)}
    raise AssertionError("no mixing weight gives r in range")


class Exported(NamedTuple):
    run_id: str
    result: ExportResult
    key: dict
    records: list[dict]


def loopback():
    """tests/judges/loopback.py (the scripted judge servers), imported once by path."""
    import importlib.util

    name = "steer_eval_tests_judges_loopback"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "judges" / "loopback.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def kit():
    """This module's helpers and constants."""
    return sys.modules[__name__]


@pytest.fixture
def exported(mlflow_store, tmp_path) -> Exported:
    """A fresh synthetic run with a 50-sample export."""
    run_id, records = make_run(tmp_path)
    result = export_samples(run_id, n=50, seed=3)
    key = load_answer_key(result.key_path, run_id)
    return Exported(run_id, result, key, records)


def pytest_generate_tests(metafunc):
    """``formula_payload``: every hostile cell above plus edge cases, one test each."""
    if "formula_payload" in metafunc.fixturenames:
        metafunc.parametrize("formula_payload", [*PAYLOADS, "-", "=", "", "safe"])
