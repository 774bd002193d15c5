"""``steer-eval ui``: the MLflow UI on the suite's store, with the addresses to open.

MLflow 3.17's UI opens an experiment on its GenAI overview unless the address asks for
the Model training view (``workflowType=machine_learning``); the experiment-kind tag the
suite sets is not enough for this version. A run's overview shows its description only
below its tags, parameters and registered models, so a run's address opens its
Artifacts tab on ``answer.md``, which the UI renders. The command prints, for every
experiment holding the suite's runs (every kind: Phase 4, 5, the study, 6, identify,
strength sweeps), its newest run on its answer and its runs (the description leads with the
latest answer, the runs table opens on the verdicts' columns), and serves until Ctrl-C,
light: one worker, no job execution (the suite never submits MLflow jobs).
"""

from __future__ import annotations

from typing import Annotated

import typer

from experiments.cli.common import PHASE_NAMES, console, friendly, out, refuse, warn_store

# One reader browsing results needs one worker, and no job runner: MLflow 3.17 starts 4
# uvicorn workers and a job-execution server with its own workers by default (15
# processes, about 2.6 GB here; with these, 2 processes and about 0.5 GB, docs/mlflow.md).
LIGHT_UI_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def register(app: typer.Typer) -> None:
    app.command("ui")(friendly(ui))


def addresses() -> list[tuple[str, str]]:
    """(what, address) for every experiment holding the suite's runs (whatever their
    kind): its newest finished parent run, opened on its answer, then its runs."""
    from experiments import tracking

    c = tracking.client()
    found = []
    for exp in sorted(c.search_experiments(), key=lambda e: e.name):
        runs = c.search_runs(
            [exp.experiment_id],
            filter_string="tags.mlflow.parentRunId IS NULL and attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
            max_results=20,
        )
        newest = next((r for r in runs if r.data.tags.get("phase")), None)
        if newest is None:
            continue  # not the suite's (an evaluation's, a stray run's)
        tracking.experiment_id(exp.name)  # sets the experiment-kind tag on older stores
        phase = newest.data.tags["phase"]
        what = f"newest {PHASE_NAMES.get(phase, phase)} run ({exp.name}), on its answer"
        found.append((what, tracking.run_ui_url(newest.info.run_id)))
        found.append((f"{exp.name} runs", tracking.ui_url(exp.experiment_id)))
    return found


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on (host, port): binding it fails."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def busy_port_message(host: str, port: int) -> str:
    return (
        f"port {port} on {host} is in use (another MLflow UI, or another program); serve on "
        f"another: make ui PORT={port + 1}, or steer-eval ui --port {port + 1}. If it is "
        f"already an MLflow UI on this store, open http://{host}:{port}"
    )


def ui(
    port: Annotated[int, typer.Option(help="port to serve on (make ui PORT=...)")] = 5000,
    host: Annotated[str, typer.Option(help="address to bind (loopback by default)")] = "127.0.0.1",
) -> None:
    """Serve the MLflow UI on the suite's store and print where the results are."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from experiments import tracking
    from experiments.tracking.store import forget_ui, write_ui

    uri = tracking.tracking_uri()
    db = tracking.sqlite_path(uri)
    warn_store()
    if uri.startswith(("http://", "https://")):
        for what, url in addresses():
            out.print(f"{what}: {url}", soft_wrap=True, markup=False, highlight=False)
        console.print(f"the store is served by {uri}; nothing to start")
        return
    if port_in_use(host, port):
        refuse(busy_port_message(host, port))
    os.environ["MLFLOW_UI_URL"] = f"http://{host}:{port}"
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--default-artifact-root",
        str(tracking.artifact_root()),
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    env = {**os.environ, **LIGHT_UI_ENV}
    # Before the server starts: on a new store both would create its tables at once.
    found = addresses() or [("MLflow UI", f"http://{host}:{port}")]
    # Its own process group, so stopping this command stops the server's workers too;
    # its log goes to stderr, the addresses to stdout.
    proc = subprocess.Popen(command, stdout=sys.stderr, start_new_session=True, env=env)

    def stop(*_args: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        with console.status(f"starting the MLflow UI on {host}:{port} (about 15 s)"):
            while proc.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2):
                        break
                except OSError:
                    time.sleep(0.5)
        if proc.poll() is not None:
            if port_in_use(host, port):  # taken while the server started
                console.print(f"[bold red]error:[/] {busy_port_message(host, port)}")
            raise typer.Exit(proc.returncode or 1)
        for what, url in found:
            out.print(f"{what}: {url}", soft_wrap=True, markup=False, highlight=False)
        if db is not None:  # other commands print addresses on this port meanwhile
            write_ui(db, os.environ["MLFLOW_UI_URL"])
        console.print("serving; Ctrl-C stops it")
        proc.wait()
    except KeyboardInterrupt:
        console.print("stopping the MLflow UI")
    finally:
        if db is not None:
            forget_ui(db)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
