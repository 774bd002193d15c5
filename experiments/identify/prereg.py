"""Development and held-out concepts, the pre-registration, and the held-out ledger.

* **The split** (:func:`split_concepts`): the concept file's synsets ordered by a
  seeded hash (sha256 of ``split_seed|synset``), the first ``heldout_fraction`` held
  out. Deterministic, independent of the file's order and of any result.
* **The pre-registration** (``identify.preregistration``, committed before any
  held-out run): its hypotheses in prose and ONE primary analysis in a fenced
  ``yaml`` block under a ``primary:`` key (predictor, outcome, strength, control,
  hypothesis sign, decision rule). A run records the file's sha256 and git commit.
* **The ledger** (:func:`heldout_scorings`): a held-out run is refused when the file is
  not committed unchanged, and when this pre-registration (its sha256) already has a
  held-out scoring, in the MLflow experiment (tag ``identify.prereg_sha256`` on a run
  whose ``identify.concept_set`` is ``heldout`` and that reached its analysis) or in
  ``<results_dir>/heldout_ledger.jsonl``. ``--force`` runs it anyway and records it as
  forced: its primary result is then not confirmatory.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

LEDGER = "heldout_ledger.jsonl"
PRIMARY_KEYS = ("predictor", "outcome", "strength", "control", "hypothesis", "rule")


class PreregistrationError(ValueError):
    """The pre-registration is missing, malformed, uncommitted, or already used."""


def split_concepts(synsets: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(development, held-out), each in the file's order."""
    ranked = sorted(synsets, key=lambda s: hashlib.sha256(f"{seed}|{s}".encode()).hexdigest())
    n_held = round(fraction * len(synsets))
    held = set(ranked[:n_held])
    return [s for s in synsets if s not in held], [s for s in synsets if s in held]


@dataclass(frozen=True)
class Preregistration:
    path: Path
    sha256: str
    primary: dict
    commit: str | None  # the last commit that touched the file, when it is committed clean

    def to_dict(self) -> dict:
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            "primary": self.primary,
            "commit": self.commit,
        }


def parse_primary(text: str) -> dict:
    """The ``primary:`` mapping of the first fenced yaml block that has one."""
    blocks = text.split("```yaml")[1:]
    for block in blocks:
        body = block.split("```", 1)[0]
        data = yaml.safe_load(body) or {}
        if isinstance(data, dict) and "primary" in data:
            primary = data["primary"]
            missing = [k for k in PRIMARY_KEYS if k not in primary]
            if missing:
                raise PreregistrationError(f"the primary analysis lacks {missing}")
            # The tables' own list (imported here: cells.py brings numpy, pandas, sklearn).
            from experiments.identify.cells import PREDICTORS

            if primary["predictor"] not in PREDICTORS:
                raise PreregistrationError(
                    f"primary predictor {primary['predictor']!r} is not one of {PREDICTORS}"
                )
            if primary["hypothesis"] not in ("positive", "negative"):
                raise PreregistrationError("primary hypothesis must be positive or negative")
            return dict(primary)
    raise PreregistrationError("no ```yaml block with a `primary:` analysis")


def _git(path: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=path.parent, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def load_preregistration(path: str | Path) -> Preregistration:
    path = Path(path)
    if not path.exists():
        raise PreregistrationError(f"no pre-registration at {path}")
    data = path.read_bytes()
    primary = parse_primary(data.decode("utf-8"))
    dirty = _git(path, "status", "--porcelain", "--", path.name)
    commit = _git(path, "log", "-1", "--format=%H", "--", path.name) if dirty == "" else None
    return Preregistration(path, hashlib.sha256(data).hexdigest(), primary, commit or None)


def heldout_scorings(sha256: str, experiment: str, results_dir: str | Path) -> list[dict]:
    """Earlier held-out scorings of this pre-registration (MLflow and the local ledger)."""
    found = []
    ledger = Path(results_dir) / LEDGER
    if ledger.exists():
        for line in ledger.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                if entry.get("prereg_sha256") == sha256:
                    found.append({**entry, "where": str(ledger)})
    from experiments import tracking

    c = tracking.client()
    exp = c.get_experiment_by_name(experiment)
    if exp is not None:
        runs = c.search_runs(
            [exp.experiment_id],
            filter_string=(
                f"tags.`identify.prereg_sha256` = '{sha256}' and "
                "tags.`identify.concept_set` = 'heldout' and tags.`identify.scored` = 'true'"
            ),
        )
        known = {f.get("run_id") for f in found}
        found += [
            {
                "run_id": r.info.run_id,
                "where": "mlflow",
                "forced": r.data.tags.get("identify.forced"),
            }
            for r in runs
            if r.info.run_id not in known
        ]
    return found


def check_heldout(
    prereg: Preregistration, experiment: str, results_dir: str | Path, force: bool
) -> list[dict]:
    """Refuse a held-out run that is not allowed (see the module docstring); return the
    earlier scorings (non-empty only when forced)."""
    if prereg.commit is None:
        raise PreregistrationError(
            f"{prereg.path} is not committed unchanged: commit the pre-registration before "
            "the held-out run"
        )
    earlier = heldout_scorings(prereg.sha256, experiment, results_dir)
    if earlier and not force:
        raise PreregistrationError(
            f"the held-out concepts were already scored under this pre-registration "
            f"({prereg.sha256[:12]}: {', '.join(e.get('run_id', '?') for e in earlier)}); "
            "write a new pre-registration, or pass --force to score them again (recorded as "
            "forced, not confirmatory)"
        )
    return earlier


def record_heldout(results_dir: str | Path, entry: dict) -> None:
    from experiments.rundir import append_jsonl

    path = Path(results_dir) / LEDGER
    path.parent.mkdir(parents=True, exist_ok=True)
    append_jsonl(path, [entry])
