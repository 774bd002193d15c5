"""Files written atomically (a temporary file renamed over the target) that others can read.

``tempfile.mkstemp`` creates its file with mode 0600 whatever the umask, so a file
written through it and renamed into place stays readable by its owner only, and so does
every copy that keeps the mode (MLflow's artefact store). :func:`temp_beside` makes the
temporary file and gives it the mode a plain ``open(path, "w")`` would have: 0666
less the process umask; :func:`give_file_mode` gives it to a file a library wrote so.
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
from pathlib import Path

_lock = threading.Lock()


@functools.cache
def umask() -> int:
    """The process umask, read once (:func:`forget_umask` reads it again). Linux reports
    it in ``/proc/self/status`` (read without changing it); elsewhere it is set to 0 and
    restored at once, under a lock."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _lock:
        old = os.umask(0)
        os.umask(old)
    return old


def forget_umask() -> None:
    """Read the umask again on the next write (after the process changed it)."""
    umask.cache_clear()


def file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0666 less the umask."""
    return 0o666 & ~umask()


def give_file_mode(path: Path) -> Path:
    """``path``, written by a library that creates its files 0600 (safetensors'
    ``save_file``), given the mode a plain ``open(path, "w")`` gives instead."""
    os.chmod(path, file_mode())
    return path


def temp_beside(path: Path, prefix: str, suffix: str) -> tuple[int, str]:
    """``(fd, name)`` of a new temporary file in ``path``'s folder, to be renamed over
    ``path``, with :func:`file_mode` instead of ``mkstemp``'s 0600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
    try:
        os.fchmod(fd, file_mode())
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    return fd, tmp
