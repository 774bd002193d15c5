"""A loopback MLflow tracking server, for ``make mlflow-server``, the tests and the bench.

The server owns the sqlite store and proxies artefacts (``--artifacts-destination``),
so a client never opens the store's files: the same setup as a shared server with a
database and an object store, on one machine. Point the suite at it with
``MLFLOW_TRACKING_URI=http://127.0.0.1:<port>``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# About 13 s to come up on a busy 2-core machine (docs/notes.md, 'MLflow server start-up');
# allow for more.
START_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(root: Path, port: int, host: str = "127.0.0.1") -> list[str]:
    """``mlflow server`` on ``root/mlruns.db`` with artefacts proxied into ``root/mlartifacts``."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{root / 'mlruns.db'}",
        "--artifacts-destination",
        str(root / "mlartifacts"),
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def running_server(
    root: str | Path, port: int | None = None, timeout: float = START_TIMEOUT
) -> Iterator[str]:
    """Start a server on 127.0.0.1, yield its URI once ``/health`` answers, stop it after.

    It runs in its own process group, so stopping it also stops its web workers; its
    output goes to ``root/server.log``.
    """
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    uri = f"http://127.0.0.1:{port}"
    with (root / "server.log").open("ab") as log:
        proc = subprocess.Popen(
            server_command(root, port),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while not healthy(uri):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"mlflow server exited with {proc.returncode}; see {root / 'server.log'}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"mlflow server on {uri} not healthy after {timeout:.0f} s")
            time.sleep(0.5)
        yield uri
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
