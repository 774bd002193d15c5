"""A local store's home: the project folder its sqlite file lives in, moved or copied whole.

MLflow keeps absolute paths in a sqlite store: each experiment's ``artifact_location``,
each run's ``artifact_uri`` and each trace's artefact location (and the suite keeps each
run's folder in the tag ``steer_eval.run_dir``). A project copied or moved to another
folder would go on writing its artefacts into, and reading its run folders from, the
folder it came from. MLflow has no call that changes them, so :func:`relocate` rewrites
them in the store's own file, before MLflow opens it: every path under the folder the
store was made in (known by the suite's layout, ``<project>/mlartifacts/<experiment>``)
is moved under the folder it is in now. It runs only when this invocation keeps
artefacts in the project's own ``mlartifacts/`` (``MLFLOW_ARTIFACT_ROOT`` unset or
inside it) and rewrites nothing else; what still points outside the folder is listed by
:func:`outside`, which ``steer-eval runs`` and ``ui`` print as a warning. Beside the
store, while ``steer-eval ui`` serves it, the address it serves on (:func:`write_ui`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import urllib.parse
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

ARTIFACTS = "mlartifacts"  # the project's artefact folder, beside its sqlite file
RUN_DIR_TAG = "steer_eval.run_dir"  # experiments.rundir.RUN_DIR_TAG (a layer below)
TRACE_LOCATION_TAG = "mlflow.artifactLocation"  # a trace's artefact location


@dataclass(frozen=True)
class Moved:
    """What :func:`relocate` rewrote: the store was made in ``old``, is in ``new``."""

    old: Path
    new: Path
    experiments: int
    runs: int
    folders: int  # runs whose ``steer_eval.run_dir`` moved with the project

    def describe(self) -> str:
        return (
            f"the MLflow store was made in {self.old} and is now in {self.new} (a copied or "
            f"moved project): the artefact locations of {self.experiments} experiments and "
            f"{self.runs} runs and the folders of {self.folders} runs now point inside "
            f"{self.new}, so nothing is read from or written to {self.old}"
        )


def location_path(location: str | None) -> Path | None:
    """The local path of an artefact location (a ``file:`` URI or an absolute path);
    None for anything else (a server's ``mlflow-artifacts:``, ``s3://``)."""
    if not location:
        return None
    if location.startswith("file:"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(location).path))
    path = Path(location)
    return path if path.is_absolute() else None


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def made_in(path: Path, home: Path) -> Path | None:
    """The project folder an artefact location outside ``home`` was made in: the folder
    holding its last ``mlartifacts`` (the suite's layout); None when it has none."""
    if inside(path, home) or ARTIFACTS not in path.parts:
        return None
    parts = path.parts
    last = len(parts) - 1 - parts[::-1].index(ARTIFACTS)
    return Path(*parts[:last]) if last > 0 else None


def _prefixes(folder: Path) -> tuple[str, ...]:
    """How a location under ``folder`` starts: as a ``file:`` URI, or as a path."""
    return (folder.as_uri() + "/", str(folder) + "/")


def _rewrite(
    con: sqlite3.Connection, table: str, column: str, where: str, old: Path, new: Path
) -> int:
    """``column`` of ``table``'s rows (``where``) that start under ``old`` and not yet
    under ``new`` (a project moved into a folder of its own), moved under ``new``;
    returns how many rows changed. Table and column names are this module's own."""
    changed = 0
    for before, after in zip(_prefixes(old), _prefixes(new), strict=True):
        cursor = con.execute(
            f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
            f"WHERE {where} substr({column}, 1, ?) = ? AND substr({column}, 1, ?) != ?",
            (after, len(before) + 1, len(before), before, len(after), after),
        )
        changed += cursor.rowcount
    return changed


def _has_tables(con: sqlite3.Connection, *names: str) -> bool:
    rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return set(names) <= {r[0] for r in rows}


def relocate(db: Path, artifact_root: Path) -> list[Moved]:
    """Move every path the store at ``db`` keeps under the project folder it was made
    in to the folder it is in now (see the module); nothing when ``artifact_root`` (where
    this invocation puts new experiments' artefacts) is not the project's own
    ``mlartifacts/``, or when the store never moved. One transaction."""
    home = db.resolve().parent
    if not db.exists() or artifact_root.resolve() != home / ARTIFACTS:
        return []
    moved = []
    with closing(sqlite3.connect(db, timeout=60)) as con, con:  # one transaction, closed
        if not _has_tables(con, "experiments", "runs", "tags"):
            return []
        locations = [r[0] for r in con.execute("SELECT artifact_location FROM experiments")]
        olds = {made_in(p, home) for p in map(location_path, locations) if p is not None}
        for old in sorted(o for o in olds if o is not None):
            experiments = _rewrite(con, "experiments", "artifact_location", "", old, home)
            runs = _rewrite(con, "runs", "artifact_uri", "", old, home)
            folders = _rewrite(con, "tags", "value", f"key = '{RUN_DIR_TAG}' AND", old, home)
            if _has_tables(con, "trace_tags"):
                where = f"key = '{TRACE_LOCATION_TAG}' AND"
                _rewrite(con, "trace_tags", "value", where, old, home)
            if _has_tables(con, "logged_models"):
                _rewrite(con, "logged_models", "artifact_location", "", old, home)
            moved.append(Moved(old, home, experiments, runs, folders))
    return moved


# Beside a store, while ``steer-eval ui`` serves it: its address, so every address the
# suite prints for the store names the port it is served on (``make ui PORT=5001``).
UI_FILE_SUFFIX = ".ui.json"


def ui_file(db: Path) -> Path:
    return db.with_name(db.name + UI_FILE_SUFFIX)


def write_ui(db: Path, url: str) -> Path:
    """Say that a UI for the store at ``db`` serves at ``url``, from this process."""
    path = ui_file(db)
    path.write_text(json.dumps({"url": url, "pid": os.getpid()}) + "\n")
    return path


def forget_ui(db: Path) -> None:
    """The UI this process served has stopped (another process's file is left)."""
    path = ui_file(db)
    if _served(path, alive=False).get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def served_ui(db: Path) -> str | None:
    """The address a ``steer-eval ui`` serves the store at ``db`` on, while it runs."""
    url = _served(ui_file(db), alive=True).get("url")
    return url if isinstance(url, str) else None


def _served(path: Path, alive: bool) -> dict[str, object]:
    """The UI file's contents; nothing when there is none, it is unreadable, or (with
    ``alive``) the process that wrote it is gone."""
    try:
        data = json.loads(path.read_text())
        pid = int(data["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if alive:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return {}
        except PermissionError:  # alive, another user's
            pass
    return dict(data)


def outside(db: Path) -> list[str]:
    """What the store at ``db`` keeps outside its own folder, a line each: an active
    experiment's artefacts (a server's locations are not local: not listed) and the
    runs whose folders are elsewhere (how many, and one of them)."""
    home = db.resolve().parent
    if not db.exists():
        return []
    uri = f"{db.resolve().as_uri()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=60)) as con:
        if not _has_tables(con, "experiments", "runs", "tags"):
            return []
        lines = []
        for name, location in con.execute(
            "SELECT name, artifact_location FROM experiments WHERE lifecycle_stage = 'active'"
        ):
            path = location_path(location)
            if path is not None and not inside(path, home):
                lines.append(f"experiment {name!r} keeps its artefacts in {path}")
        folders = [
            Path(value)
            for (value,) in con.execute(
                "SELECT t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
                "WHERE t.key = ? AND r.lifecycle_stage = 'active'",
                (RUN_DIR_TAG,),
            )
        ]
        away = sorted(str(p) for p in folders if p.is_absolute() and not inside(p, home))
        if away:
            lines.append(f"{len(away)} runs keep their folders outside it, e.g. {away[0]}")
    return lines
