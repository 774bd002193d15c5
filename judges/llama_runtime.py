"""Loading llama.cpp safely on every CPU: the AMX guard and a crash-isolated first decode.

llama-cpp-python has no wheel for most machines and builds llama.cpp from source with
``-march=native``. On an Intel Xeon with AMX that build compiles ggml's AMX backend
(``llama_print_system_info`` shows ``AMX_INT8 = 1``), and the first decode of the embedded
Q4_K_M GGUF segfaults inside its AMX matrix multiply (seen on a Sapphire Rapids class
machine; an upstream report describes the same machine-dependent crash). Two defences:

* ``make setup-judge`` builds llama.cpp with ``-mno-amx-tile -mno-amx-int8 -mno-amx-bf16``,
  so the AMX backend is not compiled at all (nothing changes on CPUs without AMX);
* a library that still reports AMX (a wheel built elsewhere, or cached by pip from an
  older build) is loaded with ``use_extra_bufts = false``: ggml then keeps the weights in
  plain CPU buffers, and the AMX kernels, which only run on tensors in AMX buffers, are
  never called. llama-cpp-python 0.3.36's ``Llama(...)`` drops unknown keyword arguments
  (``use_extra_bufts=False`` passed to it does nothing), so :func:`open_llama` sets the
  field on the model parameters the constructor starts from.

And because a native crash kills the whole process (a judge panel, or the test run) with no
Python error to catch, :func:`check_decodes` first loads the model and decodes a few tokens
in a child process, once per model file and process; a crash there becomes a
:class:`LlamaCrash` naming the signal and the library's CPU features, and the caller (the
judge, the bench, a test fixture) reports it instead of dying.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What the child process decodes: short, so the check costs about a second of model work.
CHECK_PROMPT = "The capital of France is"
CHECK_TOKENS = 4
CHECK_TIMEOUT_S = 300.0
AMX_MARKER = "AMX_INT8 = 1"


class LlamaCrash(RuntimeError):
    """llama.cpp died natively (or hung) loading or decoding a model in the child check."""


def system_info() -> str:
    """The CPU features this llama.cpp build was compiled for (``llama_print_system_info``)."""
    import llama_cpp

    info: bytes = llama_cpp.llama_print_system_info()
    return info.decode("utf-8", "replace").strip()


def amx_compiled(info: str) -> bool:
    """Whether a build's system info says ggml's AMX backend is compiled in."""
    return AMX_MARKER in info


def extra_buffers_allowed(info: str) -> bool:
    """ggml's extra buffer types (AMX, weight repacking) are used unless AMX is compiled in."""
    return not amx_compiled(info)


_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def _model_defaults(use_extra_bufts: bool) -> Iterator[None]:
    """``Llama(...)`` builds its model parameters from ``llama_model_default_params()``
    and loads the model at once; this sets ``use_extra_bufts`` on those defaults for the
    duration of one constructor call (a lock keeps two loads from interleaving)."""
    if use_extra_bufts:
        yield
        return
    import llama_cpp.llama_cpp as low

    with _PATCH_LOCK:
        original = low.llama_model_default_params

        def defaults() -> Any:
            params = original()
            params.use_extra_bufts = False
            return params

        low.llama_model_default_params = defaults
        try:
            yield
        finally:
            low.llama_model_default_params = original


def llama_options(info: str | None = None) -> dict[str, str]:
    """What a run should record about the llama.cpp it used: its CPU features and
    whether the extra buffers were turned off."""
    info = system_info() if info is None else info
    return {
        "llama_cpp_system_info": info,
        "llama_cpp_extra_buffers": "on" if extra_buffers_allowed(info) else "off (AMX compiled in)",
    }


def open_llama(model_path: str | Path, **kwargs: Any) -> Any:
    """``llama_cpp.Llama(model_path, **kwargs)`` that cannot take the AMX path."""
    from llama_cpp import Llama

    with _model_defaults(extra_buffers_allowed(system_info())):
        return Llama(model_path=str(model_path), **kwargs)


@dataclass(frozen=True)
class DecodeCheck:
    """The child's verdict: it decoded ``text`` with a library reporting ``system_info``."""

    model_path: str
    text: str
    system_info: str
    extra_buffers: bool


_CHECKED: dict[str, DecodeCheck] = {}
_CHECK_LOCK = threading.Lock()


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-returncode).name
        return f"signal {-returncode}"
    return f"exit status {returncode}"


def run_check(
    model_path: str | Path, command: list[str] | None = None, timeout: float = CHECK_TIMEOUT_S
) -> DecodeCheck:
    """Load ``model_path`` and decode a few tokens in a child process (no memo).

    ``command`` replaces the child's command line (the tests give one that crashes on
    purpose); by default it is this module run as a script on the same interpreter.
    """
    path = str(Path(model_path).resolve())
    cmd = command or [sys.executable, "-m", "judges.llama_runtime", path]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LlamaCrash(
            f"llama.cpp did not finish loading and decoding {path} within {timeout:.0f} s "
            "in a child process"
        ) from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or "").strip().splitlines()[-5:])
        raise LlamaCrash(
            f"llama.cpp crashed ({_signal_name(done.returncode)}) loading and decoding {path} "
            f"in a child process on this CPU; its build reports: {_child_info(done.stdout)}. "
            "Rebuild it without AMX (`make setup-judge` after `pip uninstall llama-cpp-python`)"
            + (f". Child's last output:\n{tail}" if tail else "")
        )
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as exc:
        raise LlamaCrash(f"the llama.cpp check printed no result: {done.stdout!r}") from exc
    return DecodeCheck(path, result["text"], result["system_info"], result["extra_buffers"])


def _child_info(stdout: str) -> str:
    """The system info line the child prints before loading (when it got that far)."""
    for line in (stdout or "").splitlines():
        if line.startswith("system_info: "):
            return line.removeprefix("system_info: ")
    return "(unknown: the child died before printing it)"


def check_decodes(model_path: str | Path) -> DecodeCheck:
    """:func:`run_check` once per model file and process; raises :class:`LlamaCrash`."""
    path = str(Path(model_path).resolve())
    with _CHECK_LOCK:
        if path not in _CHECKED:
            _CHECKED[path] = run_check(path)
        return _CHECKED[path]


def _child(model_path: str) -> None:
    """The child process: print the build's features, load, decode, print the verdict."""
    info = system_info()
    print(f"system_info: {info}", flush=True)
    llm = open_llama(
        model_path, n_ctx=256, n_threads=max(1, (os.cpu_count() or 2) // 2), verbose=False
    )
    try:
        out = llm.create_completion(CHECK_PROMPT, max_tokens=CHECK_TOKENS, temperature=0.0)
        text = out["choices"][0]["text"]
    finally:
        llm.close()
    verdict = {"text": text, "system_info": info, "extra_buffers": extra_buffers_allowed(info)}
    print(json.dumps(verdict), flush=True)


if __name__ == "__main__":  # pragma: no cover - run as the child of run_check
    _child(sys.argv[1])
