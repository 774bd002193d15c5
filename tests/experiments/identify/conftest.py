"""The identify tests' shared set-up: a throwaway git repository holding a committed
pre-registration (the held-out protocol binds one to a commit of the code and to the
study's config hash)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

# A pre-registration's primary analysis, as the tests write it.
PRIMARY = """# Pre-registration
```yaml
primary:
  predictor: auroc
  outcome: likelihood
  strength: 1.0
  control: cos_ref
  hypothesis: positive
  rule: interval excludes 0
```
"""


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def _git_repo(repo: Path) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        _git(repo, *args)
    return repo


def _bound_preregistration(
    repo: Path, binding: Callable[[Path], str], primary: str = PRIMARY
) -> Path:
    _git_repo(repo)
    (repo / "experiments").mkdir()
    (repo / "experiments" / "code.py").write_text("x = 1\n")
    _git(repo, "add", "experiments")
    _git(repo, "commit", "-q", "-m", "code")
    path = repo / "prereg.md"
    path.write_text(
        primary.replace(
            "  rule:",
            f"  config_hash: '{binding(path)}'\n"
            f"  code_commit: {_git(repo, 'rev-parse', 'HEAD')}\n  rule:",
        )
    )
    _git(repo, "add", path.name)
    _git(repo, "commit", "-q", "-m", "prereg")
    return path


@pytest.fixture(scope="session")
def primary() -> str:
    """The text of a pre-registration with a primary analysis and no binding."""
    return PRIMARY


@pytest.fixture(scope="session")
def git() -> Callable[..., str]:
    """``git(repo, *args)``: git run in ``repo``; its output, stripped."""
    return _git


@pytest.fixture(scope="session")
def git_repo() -> Callable[[Path], Path]:
    """``git_repo(folder)``: ``folder`` (made when missing) as a new git repository with
    a committer; the folder."""
    return _git_repo


@pytest.fixture(scope="session")
def bound_preregistration() -> Callable[..., Path]:
    """``bound_preregistration(repo, binding, primary=PRIMARY)``: ``repo`` made a git
    repository whose code (``experiments/code.py``) is committed, then ``primary`` bound
    to that commit and to the config hash ``binding(path)`` (of a config that names the
    pre-registration's path), committed as ``repo / "prereg.md"``; its path. A test that
    moves the code on edits ``experiments/code.py`` and commits."""
    return _bound_preregistration
