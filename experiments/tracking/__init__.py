"""MLflow plumbing: the local store by default, provenance on every run.

Every MLflow write of the suite goes through this package; :func:`tracked_run` is the
one way to open a run, log into it and close it (FAILED on an error, KILLED on Ctrl-C).
Its modules: ``context`` (the standard ``mlflow.user`` / ``mlflow.source.*`` tags),
``traces`` (one trace per generation, with feedback), ``datasets`` (inputs logged as
MLflow datasets), ``prompts`` (the judge rubric in the prompt registry).

The default store is ``sqlite:///mlruns.db`` with artefacts under ``mlartifacts/``;
``MLFLOW_TRACKING_URI`` points everything elsewhere (a remote server, say).

It is longer than 500 lines because it is the one gate every MLflow write of the suite
passes through (runs, params, metrics in batches, tags, artefacts, notes, the saved
runs-table view); the specialised writers already live in its submodules.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.tracking.columns import VIEW_TAG, column_tags, view_query
from experiments.tracking.context import context_tags, git_info, reopen_tags
from experiments.tracking.notes import EXPERIMENT_NOTES

if TYPE_CHECKING:  # mlflow and pandas load in seconds: imported where used
    import pandas as pd
    from mlflow.entities import Metric, Param, Run
    from mlflow.tracking import MlflowClient

DEFAULT_TRACKING_URI = "sqlite:///mlruns.db"
DEFAULT_ARTIFACT_ROOT = "mlartifacts"
# `make ui` serves the local store here; MLFLOW_UI_URL names another address.
DEFAULT_UI_URL = "http://127.0.0.1:5000"
# MLflow 3 accepts parameter values up to 6,000 characters; longer ones are cut (and the
# whole value is in the run's config.yaml artefact).
MAX_PARAM_LEN = 6000
NOTE_TAG = "mlflow.note.content"
MAX_NOTE_LEN = 8000  # MLflow's tag value limit
# The experiment kind MLflow's UI reads to open an experiment on its runs, not on the
# GenAI overview. The 3.17 UI decides by its GenAI / Model training switch (the URL's
# ``workflowType``) instead, so the addresses printed by ``ui_url`` carry that too.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
WORKFLOW_QUERY = "workflowType=machine_learning"


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_TRACKING_URI)


def is_local_store(uri: str | None = None) -> bool:
    """A store in a local file (sqlite or a folder), not a tracking server."""
    uri = tracking_uri() if uri is None else uri
    return uri.startswith(("sqlite:", "file:")) or "://" not in uri


def _quiet() -> None:
    for name in ("mlflow", "alembic", "sqlalchemy"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="mlflow")


def sqlite_path(uri: str | None = None) -> Path | None:
    """The database file of a ``sqlite:///`` store (relative to the working directory
    when the URI is), else None."""
    uri = tracking_uri() if uri is None else uri
    if not uri.startswith("sqlite:///") or uri.endswith(":memory:"):
        return None
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0])


class StoreNotFound(LookupError):
    """A lookup named a local store that does not exist (it is not created by a lookup)."""


def require_store() -> None:
    """Fail before a read when the configured sqlite file does not exist: opening it
    would create an empty store as a side effect of looking something up."""
    path = sqlite_path()
    if path is not None and not path.exists():
        raise StoreNotFound(
            f"no MLflow store at {path.resolve()} (MLFLOW_TRACKING_URI={tracking_uri()}); "
            "run `make run` first, or point MLFLOW_TRACKING_URI at the store that holds the run"
        )


# Stores whose schema this process has seen created and migrated.
_READY_STORES: set[str] = set()


def _ensure_schema(uri: str) -> None:
    """Create (or migrate) a sqlite store's schema once, under a file lock.

    MLflow creates the tables when a process first opens the store; two processes doing
    so at once race in the migrations ("duplicate column name", "expected to match one
    row") and all but one die. The lock file beside the database lets exactly one
    process create the schema while the others wait, then open a ready store. Many
    concurrent writers should still use ``make mlflow-server`` (one process owns the
    file), as sqlite serialises writes.
    """
    path = sqlite_path(uri)
    if path is None or store_key(uri) in _READY_STORES:
        return
    import fcntl

    from mlflow.tracking import MlflowClient

    from experiments.tracking.store import relocate

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            # a copied or moved project: its paths made to point inside it, first
            try:
                for moved in relocate(path, artifact_root()):
                    logging.getLogger(__name__).warning("%s", moved.describe())
            except sqlite3.Error as exc:  # a store it cannot write: `runs` says what is out
                logging.getLogger(__name__).warning("the store's paths stay as they are: %s", exc)
            MlflowClient(uri).search_experiments(max_results=1)  # creates or migrates
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _READY_STORES.add(store_key(uri))


def store_key(uri: str | None = None) -> str:
    """What tells stores apart in this process: a sqlite store's file, wherever the
    process runs from (``sqlite:///mlruns.db`` is another store in another folder), else
    the URI."""
    uri = tracking_uri() if uri is None else uri
    path = sqlite_path(uri)
    return str(path.resolve()) if path is not None else uri


def store_warnings() -> list[str]:
    """Where the configured local store keeps things outside its own folder (a line
    each, ``store.outside``): a copy of the project would still use them. None for a
    store that is not a sqlite file, or keeps everything inside its folder."""
    from experiments.tracking.store import outside

    path = sqlite_path()
    if path is None or not path.exists():
        return []
    client()  # a moved project's store is relocated first (_ensure_schema)
    return outside(path)


def client() -> MlflowClient:
    """An MlflowClient on the configured store (the global URI is set to match); a new
    sqlite store gets its schema first, safely against concurrent first runs."""
    _quiet()
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    _ensure_schema(uri)
    mlflow.set_tracking_uri(uri)
    return MlflowClient(uri)


def artifact_root() -> Path:
    """Where a local store's experiments keep artefacts: ``MLFLOW_ARTIFACT_ROOT``, else
    ``mlartifacts/`` beside the sqlite file (not in whatever folder a command runs from)."""
    explicit = os.environ.get("MLFLOW_ARTIFACT_ROOT")
    if explicit:
        return Path(explicit).resolve()
    db = sqlite_path()
    base = db.resolve().parent if db is not None else Path.cwd()
    return base / DEFAULT_ARTIFACT_ROOT


# (store, experiment name) -> id: one lookup per process, not one per child run.
_EXPERIMENT_IDS: dict[tuple[str, str], str] = {}


def experiment_id(name: str) -> str:
    """Get or create an experiment; local stores keep artefacts under ``mlartifacts/``
    (a server keeps its own artefact location, e.g. ``--artifacts-destination``)."""
    cached = _EXPERIMENT_IDS.get((store_key(), name))
    if cached is not None:
        return cached
    c = client()
    exp = c.get_experiment_by_name(name)
    # its kind (an older version made it without) and the runs table's default columns
    tags = {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, **column_tags(name)}
    found: str
    if exp is not None:
        for key, value in tags.items():
            if exp.tags.get(key) != value:
                c.set_experiment_tag(exp.experiment_id, key, value)
        found = exp.experiment_id
    else:
        location = (artifact_root() / name).as_uri() if is_local_store() else None
        if name in EXPERIMENT_NOTES:
            tags[NOTE_TAG] = EXPERIMENT_NOTES[name]
        found = _create_experiment(c, name, location, tags)
    _EXPERIMENT_IDS[(store_key(), name)] = found
    return found


def _create_experiment(
    c: MlflowClient, name: str, location: str | None, tags: dict[str, str]
) -> str:
    """Create an experiment; when a concurrent first run created it a moment earlier,
    use theirs (the name is unique in the store, so one creation wins)."""
    from mlflow.exceptions import MlflowException

    try:
        return c.create_experiment(name, artifact_location=location, tags=tags)
    except MlflowException:
        exp = c.get_experiment_by_name(name)
        if exp is None:
            raise
        return str(exp.experiment_id)


def git_commit() -> dict[str, str]:
    """The commit and whether tracked files differ from it (for the bench report)."""
    info = git_info()
    return {"git_commit": info.get("commit", "unknown"), "git_dirty": info.get("dirty", "false")}


def params_from(flat: Mapping[str, object]) -> dict[str, str]:
    out = {}
    for key, value in flat.items():
        text = json.dumps(value) if isinstance(value, list | dict) else str(value)
        out[key] = text if len(text) <= MAX_PARAM_LEN else text[: MAX_PARAM_LEN - 1] + "…"
    return out


def _param_items(params: Mapping[str, object]) -> list[Param]:
    from mlflow.entities import Param

    return [Param(k, v) for k, v in params_from(params).items()]


def log_params(run_id: str, params: Mapping[str, object]) -> None:
    items = _param_items(params)
    c = client()
    for start in range(0, len(items), 90):
        c.log_batch(run_id, params=items[start : start + 90])


def log_new_params(run_id: str, params: Mapping[str, object]) -> None:
    """Log the parameters a run does not have yet; MLflow parameters never change, so a
    different value for a logged key is reported and skipped rather than raised."""
    have = client().get_run(run_id).data.params
    new = {}
    for key, value in params_from(params).items():
        if key not in have:
            new[key] = value
        elif have[key] != value:
            logging.getLogger(__name__).warning(
                "run %s keeps parameter %s = %s (not %s)", run_id, key, have[key], value
            )
    if new:
        log_params(run_id, new)


def _metric_items(metrics: Mapping[str, float | None], step: int = 0) -> list[Metric]:
    import math
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [
        Metric(k, float(v), now, step)
        for k, v in metrics.items()
        if v is not None and math.isfinite(float(v))
    ]


def log_metrics(run_id: str, metrics: Mapping[str, float | None], step: int = 0) -> None:
    """Log finite metrics; ``None`` (not evaluable) is skipped, never written as NaN."""
    items = _metric_items(metrics, step)
    c = client()
    for start in range(0, len(items), 900):
        c.log_batch(run_id, metrics=items[start : start + 900])


def set_tags(run_id: str, tags: dict[str, str]) -> None:
    """Every tag in one ``log_batch`` request (one store transaction), not one per tag."""
    from mlflow.entities import RunTag

    items = [RunTag(k, str(v)) for k, v in tags.items()]
    c = client()
    for start in range(0, len(items), 100):
        c.log_batch(run_id, tags=items[start : start + 100])


def log_params_and_metrics(
    run_id: str, params: Mapping[str, object], metrics: Mapping[str, float | None]
) -> None:
    """Both in one request when they fit (a child run's usual case): one round trip less
    per child against a server."""
    param_items = _param_items(params)
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
    # MLflow's standard context tags (user, source, git commit) and the package versions,
    # read once per process (two git calls per child run were most of the driver's own
    # logging time), then the run's own
    all_tags = {**context_tags(), **(tags or {})}
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = client().create_run(experiment_id(experiment), run_name=run_name, tags=all_tags)
    return str(run.info.run_id)


def end_run(run_id: str, status: str = "FINISHED") -> None:
    client().set_terminated(run_id, status=status)


def get_run(run_id: str) -> Run:
    """The run, or a clear error when it does not exist in the configured store."""
    from mlflow.exceptions import MlflowException

    require_store()
    try:
        return client().get_run(run_id)
    except MlflowException as exc:
        raise LookupError(
            f"no MLflow run {run_id!r} in {tracking_uri()}; list runs with `steer-eval runs`"
        ) from exc


def child_runs(parent_run_id: str, experiment: str) -> list[Run]:
    """Every child of a run, page by page (a 10,000-concept grid has 30,000 per cell)."""
    c = client()
    runs: list[Run] = []
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


def latest_parent_run(experiment: str, phase: str = "5", finished: bool = True) -> str:
    """The id of the newest top-level run of a phase, for ``--run latest``.

    ``finished``: the newest FINISHED run (what results are read from); otherwise the
    newest one that is not finished (what ``--resume latest`` continues). The store does
    the filtering (``tags.mlflow.parentRunId IS NULL``), so hundreds of child runs newer
    than the parent cannot hide it. A missing experiment is an error, not created as a
    side effect of a lookup.
    """
    require_store()
    c = client()
    exp = c.get_experiment_by_name(experiment)
    status = "= 'FINISHED'" if finished else "!= 'FINISHED'"
    runs: list[Run] = []
    if exp is not None:
        runs = c.search_runs(
            [exp.experiment_id],
            filter_string=(
                f"tags.phase = '{phase}' and attributes.status {status} "
                "and tags.mlflow.parentRunId IS NULL"
            ),
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
    if runs:
        return str(runs[0].info.run_id)
    kind = "finished" if finished else "unfinished (interrupted)"
    hint = "run `make run` first" if finished else "nothing to resume"
    raise LookupError(
        f"no {kind} Phase {phase} run in experiment {experiment!r} of {tracking_uri()}; {hint}"
    )


def set_note(run_id: str, markdown: str, whole: str = "summary.md") -> None:
    """The run's description in the UI (``mlflow.note.content``), e.g. its summary; a
    text over MLflow's tag limit is cut at a line and points at the ``whole`` artefact."""
    if len(markdown) > MAX_NOTE_LEN:
        tail = f"\n\n… (cut here; the whole text is the artefact `{whole}`)\n"
        cut = markdown[: MAX_NOTE_LEN - len(tail)]
        markdown = cut[: cut.rfind("\n") if "\n" in cut else len(cut)] + tail
    client().set_tag(run_id, NOTE_TAG, markdown)


def ui_base() -> str:
    """Where the UI for the configured store is served: the tracking server itself, else
    ``MLFLOW_UI_URL``, else the address a running ``steer-eval ui`` serves the store on
    (its port: ``make ui PORT=5001``), else the address `make ui` uses by default."""
    from experiments.tracking.store import served_ui

    uri = tracking_uri()
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    db = sqlite_path(uri)
    served = served_ui(db) if db is not None else None
    return os.environ.get("MLFLOW_UI_URL", served or DEFAULT_UI_URL).rstrip("/")


def ui_path(
    experiment_id: str,
    run_id: str | None = None,
    page: str | None = None,
    artifact: str | None = None,
) -> str:
    """The UI's in-page address (``#/experiments/...``) of a run, or of an experiment's
    runs (or ``page``: ``traces``), opened on the Model training view where runs are
    listed; ``artifact`` opens the run's Artifacts tab on that file (a markdown file is
    shown rendered), which is how a run opens on its answer."""
    path = f"#/experiments/{experiment_id}"
    if run_id is not None:
        path += f"/runs/{run_id}"
        if artifact is not None:
            path += f"/artifacts/{artifact}"
    elif page is not None:
        path += f"/{page}"
    return f"{path}?{WORKFLOW_QUERY}"


def ui_url(
    experiment_id: str,
    run_id: str | None = None,
    page: str | None = None,
    artifact: str | None = None,
) -> str:
    """The full UI address of :func:`ui_path`, on :func:`ui_base`; an experiment's runs
    page opens on its default columns where it has them (``tracking/columns.py``)."""
    if run_id is None and page is None:
        exp = client().get_experiment(experiment_id)
        if VIEW_TAG in exp.tags:  # the runs tab, on the saved view
            return f"{ui_base()}/{ui_path(experiment_id, page='runs')}{view_query(exp.name)}"
    return f"{ui_base()}/{ui_path(experiment_id, run_id, page, artifact)}"


# The file a run opens on in the UI when it has one: its answer (experiments.rundir).
ANSWER_ARTIFACT = "answer.md"


def has_artifact(run_id: str, name: str) -> bool:
    return name in {f.path for f in client().list_artifacts(run_id)}


def run_ui_url(run_id: str) -> str:
    """A run's UI address: on its answer when it has one (Phase 5 and 6 parents), else
    its overview."""
    run = get_run(run_id)
    artifact = ANSWER_ARTIFACT if has_artifact(run_id, ANSWER_ARTIFACT) else None
    return ui_url(run.info.experiment_id, run_id, artifact=artifact)


def set_experiment_note(name: str, latest: str) -> None:
    """The experiment's description: ``latest`` (a line on its newest parent run and
    where to read its answer) above what the experiment holds."""
    held = EXPERIMENT_NOTES.get(name, "")
    text = latest + ("\n\n" + held if held else "")
    client().set_experiment_tag(experiment_id(name), NOTE_TAG, text[:MAX_NOTE_LEN])


# A Phase 4 run id beside the classifiers it trained, so a later Phase 5 run that loads
# them from disk still links to the run that made them.
CLASSIFIER_RUN_FILE = "mlflow_run.json"


def remember_run(directory: str | Path, run_id: str) -> None:
    path = Path(directory) / CLASSIFIER_RUN_FILE
    path.write_text(json.dumps({"run_id": run_id, "tracking_uri": tracking_uri()}) + "\n")


def remembered_run(directory: str | Path | None) -> str | None:
    """The run that wrote ``directory``, when it was logged to the configured store."""
    if directory is None:
        return None
    try:
        data = json.loads((Path(directory) / CLASSIFIER_RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data.get("run_id") if data.get("tracking_uri") == tracking_uri() else None


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
    else:  # reopened: the command that made it stays (context.reopen_tags)
        c = client()
        c.update_run(run_id, "RUNNING")
        for key, value in {**reopen_tags(), **(tags or {})}.items():
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


def overwrite_table(run_id: str, table: pd.DataFrame, name: str) -> None:
    """Log ``table`` as an MLflow table, replacing an earlier one of the same name
    (``log_table`` would append to it); the file format is log_table's own."""
    import tempfile

    c = client()
    if not has_artifact(run_id, name):
        c.log_table(run_id, table, name)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        table.to_json(path, orient="split", index=False, date_format="iso")
        c.log_artifact(run_id, str(path))
