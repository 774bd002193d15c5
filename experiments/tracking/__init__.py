"""MLflow plumbing: the local store by default, provenance on every run.

Every MLflow write of the suite goes through this package; :func:`tracked_run` is the
one way to open a run, log into it and close it (FAILED on an error, KILLED on Ctrl-C).

The default store is ``sqlite:///mlruns.db`` with artefacts under ``mlartifacts/``;
``MLFLOW_TRACKING_URI`` points everything elsewhere (a remote server, say).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

DEFAULT_TRACKING_URI = "sqlite:///mlruns.db"
DEFAULT_ARTIFACT_ROOT = "mlartifacts"
PACKAGES = (
    "torch",
    "transformers",
    "sentence-transformers",
    "mlflow",
    "numpy",
    "scipy",
    "pandas",
    "scikit-learn",
    "nltk",
    "anthropic",
    "openai",
    "llama-cpp-python",
    "steer-eval",
)
# MLflow param values are capped; longer values are stored as artefacts instead.
MAX_PARAM_LEN = 500


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_TRACKING_URI)


def _quiet() -> None:
    for name in ("mlflow", "alembic", "sqlalchemy"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="mlflow")


def client():
    """An MlflowClient on the configured store (the global URI is set to match)."""
    _quiet()
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(tracking_uri())
    return MlflowClient(tracking_uri())


# (tracking URI, experiment name) -> id: one lookup per process, not one per child run.
_EXPERIMENT_IDS: dict[tuple[str, str], str] = {}


def experiment_id(name: str) -> str:
    """Get or create an experiment; local stores keep artefacts under ``mlartifacts/``
    (a server keeps its own artefact location, e.g. ``--artifacts-destination``)."""
    cached = _EXPERIMENT_IDS.get((tracking_uri(), name))
    if cached is not None:
        return cached
    c = client()
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        found = exp.experiment_id
    else:
        location = None
        if tracking_uri().startswith(("sqlite:", "file:")) or "://" not in tracking_uri():
            root = Path(os.environ.get("MLFLOW_ARTIFACT_ROOT", DEFAULT_ARTIFACT_ROOT)).resolve()
            location = (root / name).as_uri()
        found = c.create_experiment(name, artifact_location=location)
    _EXPERIMENT_IDS[(tracking_uri(), name)] = found
    return found


def git_commit() -> dict[str, str]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": str(bool(dirty and dirty != "unknown")).lower()}


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


@functools.lru_cache(maxsize=1)
def _provenance() -> tuple[tuple[str, str], ...]:
    tags = git_commit()
    tags.update({f"version.{k}": v for k, v in package_versions().items()})
    return tuple(tags.items())


def provenance_tags() -> dict[str, str]:
    """Tags every run carries: the commit and the package versions (read once per
    process: two git calls per child run were most of the driver's own logging time)."""
    return dict(_provenance())


def params_from(flat: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in flat.items():
        text = json.dumps(value) if isinstance(value, list | dict) else str(value)
        out[key] = text if len(text) <= MAX_PARAM_LEN else text[: MAX_PARAM_LEN - 1] + "…"
    return out


def log_params(run_id: str, params: dict[str, Any]) -> None:
    from mlflow.entities import Param

    items = [Param(k, v) for k, v in params_from(params).items()]
    c = client()
    for start in range(0, len(items), 90):
        c.log_batch(run_id, params=items[start : start + 90])


def _metric_items(metrics: dict[str, float | None], step: int = 0) -> list:
    import math
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [
        Metric(k, float(v), now, step)
        for k, v in metrics.items()
        if v is not None and math.isfinite(float(v))
    ]


def log_metrics(run_id: str, metrics: dict[str, float | None], step: int = 0) -> None:
    """Log finite metrics; ``None`` (not evaluable) is skipped, never written as NaN."""
    items = _metric_items(metrics, step)
    c = client()
    for start in range(0, len(items), 900):
        c.log_batch(run_id, metrics=items[start : start + 900])


def log_params_and_metrics(
    run_id: str, params: dict[str, Any], metrics: dict[str, float | None]
) -> None:
    """Both in one request when they fit (a child run's usual case): one round trip less
    per child against a server."""
    from mlflow.entities import Param

    param_items = [Param(k, v) for k, v in params_from(params).items()]
    metric_items = _metric_items(metrics)
    if len(param_items) > 90 or len(metric_items) > 900:
        log_params(run_id, params)
        log_metrics(run_id, metrics)
        return
    client().log_batch(run_id, metrics=metric_items, params=param_items)


def start_run(
    experiment: str,
    run_name: str,
    tags: dict[str, str] | None = None,
    parent_run_id: str | None = None,
) -> str:
    all_tags = {**provenance_tags(), **(tags or {})}
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = client().create_run(experiment_id(experiment), run_name=run_name, tags=all_tags)
    return run.info.run_id


def end_run(run_id: str, status: str = "FINISHED") -> None:
    client().set_terminated(run_id, status=status)


def get_run(run_id: str):
    """The run, or a clear error when it does not exist in the configured store."""
    from mlflow.exceptions import MlflowException

    try:
        return client().get_run(run_id)
    except MlflowException as exc:
        raise LookupError(
            f"no MLflow run {run_id!r} in {tracking_uri()}; list runs with `make ui`"
        ) from exc


def child_runs(parent_run_id: str, experiment: str) -> list:
    """Every child of a run, page by page (a 10,000-concept grid has 30,000 per cell)."""
    c = client()
    runs: list = []
    token = None
    while True:
        page = c.search_runs(
            [experiment_id(experiment)],
            filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
            max_results=5000,
            page_token=token,
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def latest_parent_run(experiment: str, phase: str = "5") -> str:
    """The id of the newest finished top-level run of a phase, for ``--run latest``.

    The store does the filtering (``tags.mlflow.parentRunId IS NULL``), so hundreds of
    child runs newer than the parent cannot hide it. A missing experiment is an error,
    not created as a side effect of a lookup.
    """
    c = client()
    exp = c.get_experiment_by_name(experiment)
    runs = []
    if exp is not None:
        runs = c.search_runs(
            [exp.experiment_id],
            filter_string=(
                f"tags.phase = '{phase}' and attributes.status = 'FINISHED' "
                "and tags.mlflow.parentRunId IS NULL"
            ),
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
    if runs:
        return runs[0].info.run_id
    raise LookupError(
        f"no finished Phase {phase} run in experiment {experiment!r} of {tracking_uri()}; "
        "run `make run` first"
    )


@contextmanager
def tracked_run(
    experiment: str,
    run_name: str,
    *,
    tags: dict[str, str] | None = None,
    parent_run_id: str | None = None,
    run_id: str | None = None,
) -> Iterator[str]:
    """Start a run (or reopen ``run_id``), yield its id, and always close it.

    The run ends FINISHED when the block completes, KILLED on KeyboardInterrupt and
    FAILED on any other exception, which is re-raised.
    """
    if run_id is None:
        run_id = start_run(experiment, run_name, tags=tags, parent_run_id=parent_run_id)
    else:
        c = client()
        c.update_run(run_id, "RUNNING")
        for key, value in {**provenance_tags(), **(tags or {})}.items():
            c.set_tag(run_id, key, value)
    try:
        yield run_id
    except KeyboardInterrupt:
        end_run(run_id, "KILLED")
        raise
    except BaseException:
        end_run(run_id, "FAILED")
        raise
    end_run(run_id)


def overwrite_table(run_id: str, table, name: str) -> None:
    """Log ``table`` as an MLflow table, replacing an earlier one of the same name
    (``log_table`` would append to it); the file format is log_table's own."""
    import tempfile

    c = client()
    if name not in {f.path for f in c.list_artifacts(run_id)}:
        c.log_table(run_id, table, name)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        table.to_json(path, orient="split", index=False, date_format="iso")
        c.log_artifact(run_id, str(path))
