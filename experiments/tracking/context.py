"""The standard MLflow context tags every run carries: who ran it, from what, at which commit.

``MlflowClient.create_run`` adds none of them (docs/notes.md, 'MLflow context tags'), so
the UI's User, Source and Version columns stay empty unless we add them. MLflow's own git
context reads the repository of ``sys.argv[0]``, which for ``steer-eval`` is the virtual
environment's console script (in the main checkout, even when the code runs from a
worktree), so the commit is read from the repository that holds this package instead.
Everything here is computed once per process: a run with 30 children asks git once.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

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
# The repository this package lives in (experiments/tracking/context.py -> repo root).
REPO = Path(__file__).resolve().parents[2]
PROGRAM = "steer-eval"

USER = "mlflow.user"
SOURCE_NAME = "mlflow.source.name"
SOURCE_TYPE = "mlflow.source.type"
HOST_TAG = "steer_eval.host"  # the machine a run ran on (`run --dry-run` estimates from it)
DEVICE_TAG = "steer_eval.device"  # the device type its model ran on (cpu, cuda)
MODEL_TAG = "steer_eval.model_id"  # the loaded model's id (embedded:gemma-3-270m, ...)
# How its texts were decoded: the decode policy and, on a card, its kernels, which move
# a sampled text's last bits (steering/decode_kernels.py)
DECODE_TAG = "steer_eval.decode"
# The machine's load when a run started (1-minute load average) and its CPU count: a dry
# run says when the run it estimates from ran under load
LOAD_TAG = "steer_eval.load"
CPUS_TAG = "steer_eval.cpus"
# Torch's thread count for the run (a CPU row's last bits depend on it), where it came
# from (the free cores and the load they were read from, the user's environment, a
# resumed run's first start: steering/platform.ThreadChoice) and OpenMP's wait policy
THREADS_TAG = "steer_eval.threads"
THREADS_FROM_TAG = "steer_eval.threads_from"
WAIT_POLICY_TAG = "steer_eval.omp_wait_policy"
GIT_COMMIT = "mlflow.source.git.commit"
GIT_BRANCH = "mlflow.source.git.branch"
GIT_REPO_URL = "mlflow.source.git.repoURL"
COMMAND_TAG = "steer_eval.command"  # the command that made the run (kept when reopened)
# The command that last reopened a run: a rescore, or anything else (a resume, the panel
# adding to its child); the command that made it stays.
RESCORE_COMMAND_TAG = "steer_eval.rescore_command"
REOPEN_COMMAND_TAG = "steer_eval.reopen_command"
# Set on a run reopened to resume or rescore it: its record's timings cover only what ran
# after the reopening, so a dry run does not estimate from it (kernel/estimate.py).
REOPENED_TAG = "steer_eval.reopened"
MAX_TAG_LEN = 5000


def load_tags() -> dict[str, str]:
    """The machine's load now (:data:`LOAD_TAG`, :data:`CPUS_TAG`); none where the
    platform has no load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return {}
    return {LOAD_TAG: f"{load:.2f}", CPUS_TAG: str(os.cpu_count() or 1)}


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@lru_cache(maxsize=1)
def git_info() -> dict[str, str]:
    """Commit, branch, remote URL and whether tracked files differ from the commit."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {}
    info = {"commit": commit}
    branch = _git("rev-parse", "--abbrev-ref", "HEAD")
    if branch and branch != "HEAD":
        info["branch"] = branch
    url = _git("config", "--get", "remote.origin.url")
    if url:
        info["repo_url"] = url
    status = _git("status", "--porcelain", "--untracked-files=no")
    info["dirty"] = str(bool(status)).lower()
    return info


@lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    from importlib import metadata  # 30 ms; only runs that log need it, not --help

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def command_words(argv: list[str]) -> list[str]:
    """``steer-eval`` and its subcommand words (``human import``), options left out."""
    words = [PROGRAM]
    for word in argv[1:]:
        if word.startswith("-"):
            break
        words.append(word)
        if len(words) == 3:
            break
    return words


def is_cli(argv: list[str]) -> bool:
    """True when this process is the ``steer-eval`` command (console script or -m)."""
    first = Path(argv[0]).name if argv else ""
    return first == PROGRAM or (first == "__main__.py" and "experiments" in argv[0])


@lru_cache(maxsize=1)
def _mlflow_context() -> dict[str, str]:
    from mlflow.tracking.context.registry import resolve_tags

    return {k: v for k, v in resolve_tags({}).items() if k in (USER, SOURCE_NAME, SOURCE_TYPE)}


def context_tags(argv: list[str] | None = None) -> dict[str, str]:
    """``mlflow.user``, ``mlflow.source.*`` (git included), the command line, the versions."""
    argv = list(sys.argv if argv is None else argv)
    tags = dict(_mlflow_context())
    tags.setdefault(USER, os.environ.get("USER", "unknown"))
    tags[SOURCE_TYPE] = "LOCAL"
    tags[HOST_TAG] = platform.node() or "unknown"
    if is_cli(argv):
        tags[SOURCE_NAME] = " ".join(command_words(argv))
        tags[COMMAND_TAG] = " ".join([PROGRAM, *argv[1:]])[:MAX_TAG_LEN]
    git = git_info()
    if "commit" in git:
        tags[GIT_COMMIT] = git["commit"]
        tags["git_dirty"] = git["dirty"]
    if "branch" in git:
        tags[GIT_BRANCH] = git["branch"]
    if "repo_url" in git:
        tags[GIT_REPO_URL] = git["repo_url"]
    tags.update({f"version.{k}": v for k, v in package_versions().items()})
    return tags


def reopen_tags(argv: list[str] | None = None) -> dict[str, str]:
    """:func:`context_tags` for a run reopened to rescore or resume it: the command that
    made the run (``mlflow.source.name``, :data:`COMMAND_TAG`) is its provenance and is
    kept; this command goes under :data:`RESCORE_COMMAND_TAG` (``steer-eval rescore``)
    or :data:`REOPEN_COMMAND_TAG` (anything else: ``run --resume``, the panel)."""
    argv = list(sys.argv if argv is None else argv)
    tags = context_tags(argv)
    tags.pop(SOURCE_NAME, None)
    command = tags.pop(COMMAND_TAG, None)
    if command is not None:
        words = command_words(argv)
        rescore = len(words) > 1 and words[1] == "rescore"
        tags[RESCORE_COMMAND_TAG if rescore else REOPEN_COMMAND_TAG] = command
    return tags
