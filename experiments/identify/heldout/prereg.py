"""Development and held-out concepts, the pre-registration, and the held-out ledger.

* **The split** (:func:`split_concepts`): the concept file's synsets ordered by a
  seeded hash (sha256 of ``split_seed|synset``), the first ``heldout_fraction`` held
  out. Deterministic, independent of the file's order and of any result.
* **The pre-registration** (``identify.preregistration``, committed before any
  held-out run): its hypotheses in prose and ONE primary analysis in a fenced
  ``yaml`` block under a ``primary:`` key (predictor, outcome, strength, control,
  hypothesis sign, decision rule). A run records the file's sha256 and git commit. The
  sha256 covers what was registered: the bytes before :data:`DEVIATIONS_MARKER`, after
  which deviations are appended as they happen without unbinding the shards.
* **The binding** (:func:`check_binding`): the primary block names ``config_hash`` (the
  study config's :func:`study_hash`) and ``code_commit``; a held-out run whose config or
  code differs, or that measures the outcome at another strength, is refused (so are
  ``--set``, ``--concepts``, ``--quick`` and ``--model`` with ``identify run --heldout``,
  in the CLI).
* **The ledger** (:func:`heldout_scorings`): a held-out run is refused when the file is
  not committed unchanged, and when this pre-registration (its sha256) already has a
  held-out scoring, started or finished, in the MLflow experiment (tag
  ``identify.prereg_sha256`` on a run whose ``identify.concept_set`` is ``heldout``) or in
  ``<results_dir>/heldout_ledger.jsonl``, whose intent-to-score entry is written before
  the first held-out cell is computed (a killed run leaves its trace). ``--force`` runs
  it anyway and records it as forced: its primary result is then not confirmatory;
  ``--resume`` finishes the same scoring once the pre-registration and the binding are
  checked again as for a new run (:func:`check_resume`; a ``resumed`` entry). Each entry
  is mirrored to its MLflow run after the local line is written (:func:`mirror_ledger`).
* **Shards** (``identify.shard_size``, ``identify/heldout/shards.py``): a held-out set too large
  for one session is scored in shards, each one complete run; the ledger then allows one
  scoring per (pre-registration, shard) and one ``pooled`` scoring of the primary
  (:func:`conflicts`: an unsharded scoring conflicts with every other).

Longer than 500 lines: the whole confirmatory contract (split, parse, binding to config,
code, checkout and design table, ledger) in one module, read as one by whoever audits a
held-out result.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError

from experiments.record import PrimarySpec
from experiments.rundir import append_jsonl, read_jsonl

if TYPE_CHECKING:
    from experiments.config import IdentifyStudyConfig

LEDGER = "heldout_ledger.jsonl"
# The ledger's mirror on each held-out run: tags ``steer_eval.ledger.<status>`` and an artefact.
LEDGER_TAG = "steer_eval.ledger"
LEDGER_ARTEFACT = "ledger.jsonl"
PRIMARY_KEYS = ("predictor", "outcome", "strength", "control", "hypothesis", "rule")
# What a held-out run is bound to: the study config's hash (``study_hash``) and the commit
# whose code it was written for (the code paths below must be unchanged since).
BINDING_KEYS = ("config_hash", "code_commit")
ESTIMATORS = (
    "linear_cos", "flexible_cos", "equal_geometry", "practitioner", "practitioner_full_data",
)  # fmt: skip
# v3's estimators: run only on a grid the design simulation passed (a design_table).
GATED = ("equal_geometry", "practitioner", "practitioner_full_data")
# The line after which a pre-registration's deviations are appended once it is bound: the
# bytes before it are what was registered (the sha256 runs and ledgers carry).
DEVIATIONS_MARKER = b"<!-- deviations below are appended after binding, outside the sha256 -->"
# A co-primary (``co_primaries`` in the primary block) names itself and may replace these
# of the primary's keys; everything else it takes from the primary.
CO_PRIMARY_KEYS = ("name", "estimand", "estimator", "hypothesis", "sesoi", "equivalence_margin")
MULTIPLICITY = ("holm",)
# What flexible_cos may hold beside AUROC: cos(v, v*) (its spline per manipulation) and the
# dose (log next-token KL of each direction at its β).
FLEXIBLE_CONTROLS = ("cos_ref", "log_kl")
CODE_PATHS = (
    "experiments", "steering", "metrics", "judges", "configs", "data", "pyproject.toml",
    "constraints.txt",
)  # fmt: skip


class PreregistrationError(ValueError):
    """The pre-registration is missing, malformed, uncommitted, or already used."""


def split_concepts(synsets: list[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(development, held-out), each in the file's order."""
    ranked = sorted(synsets, key=lambda s: hashlib.sha256(f"{seed}|{s}".encode()).hexdigest())
    held = set(ranked[: round(fraction * len(synsets))])
    return [s for s in synsets if s not in held], [s for s in synsets if s in held]


@dataclass(frozen=True)
class Preregistration:
    path: Path
    sha256: str
    primary: PrimarySpec
    commit: str | None  # the last commit that touched the file, when it is committed clean

    def to_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            "primary": self.primary.model_dump(),
            "commit": self.commit,
        }


def parse_primary(text: str) -> PrimarySpec:
    """The ``primary:`` mapping of the first fenced yaml block that has one."""
    for block in text.split("```yaml")[1:]:
        body = block.split("```", 1)[0]
        data = yaml.safe_load(body) or {}
        if isinstance(data, dict) and "primary" in data:
            primary = _spec(data["primary"])
            for co in primaries(primary)[1:]:
                _check_primary(co)
            return _check_primary(primary)
    raise PreregistrationError("no ```yaml block with a `primary:` analysis")


def _spec(block: object) -> PrimarySpec:
    """A primary block with its required keys, every key one a version declares, each
    value of its type (:class:`~experiments.record.PrimarySpec`)."""
    if not isinstance(block, dict):
        raise PreregistrationError("`primary:` must be a mapping of the analysis' keys")
    missing = [k for k in PRIMARY_KEYS if k not in block]
    if missing:
        raise PreregistrationError(f"the primary analysis lacks {missing}")
    try:
        return PrimarySpec.model_validate(block)
    except ValidationError as exc:
        raise PreregistrationError(f"the primary block does not read: {exc}") from None


def primaries(primary: PrimarySpec) -> list[PrimarySpec]:
    """The primary and its co-primaries, each a whole spec: a co-primary is the primary
    with its own ``name`` and the keys of :data:`CO_PRIMARY_KEYS` it gives; without
    ``co_primaries`` the primary alone. Several are read together by ``multiplicity``
    (``holm``: ``identify/estimation/multiplicity.py``) at family-wise ``alpha`` (0.05)."""
    cos = primary.co_primaries or []
    if not cos:
        return [primary]
    if not isinstance(cos, list) or not all(isinstance(c, dict) for c in cos):
        raise PreregistrationError("co_primaries: give a list of mappings, each with a name")
    if primary.multiplicity not in MULTIPLICITY:
        raise PreregistrationError(
            f"co_primaries need `multiplicity:` one of {MULTIPLICITY} in the primary block"
        )
    base = primary.model_dump(exclude={"co_primaries"})
    out = [_spec({**base, "name": primary.label()})]
    for co in cos:
        extra = sorted(set(co) - set(CO_PRIMARY_KEYS))
        if "name" not in co or extra:
            raise PreregistrationError(
                f"a co-primary names itself (name:) and may set only {CO_PRIMARY_KEYS}; "
                f"got {sorted(co)}"
            )
        out.append(_spec({**base, **co}))
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise PreregistrationError(f"co-primaries need distinct names, got {names}")
    return out


def _check_primary(primary: PrimarySpec) -> PrimarySpec:
    """One primary spec checked (see :func:`parse_primary`); returns it."""
    # The tables' own list and the declared outcomes (imported here: they bring numpy,
    # pandas, sklearn): the primary's outcome is one the estimands read on every direction.
    from experiments.identify.estimation.cells import PREDICTORS
    from experiments.identify.measures import OUTCOMES
    from experiments.kernel.outcomes import Estimator

    allowed = (*PREDICTORS, "probit_auroc")
    outcomes = [k for k, o in OUTCOMES.items() if Estimator.PRIMARY in o.estimators]
    if primary.predictor not in allowed:
        raise PreregistrationError(
            f"primary predictor {primary.predictor!r} is not one of {allowed}"
        )
    if primary.hypothesis not in ("positive", "negative"):
        raise PreregistrationError("primary hypothesis must be positive or negative")
    if (primary.estimator or "linear_cos") not in ESTIMATORS:
        raise PreregistrationError(
            f"primary estimator {primary.estimator!r} is not one of {ESTIMATORS}"
        )
    if primary.outcome not in outcomes:
        raise PreregistrationError(
            f"primary outcome {primary.outcome!r} is not one this study measures "
            f"for every direction ({', '.join(outcomes)})"
        )
    controls = primary.controls
    if primary.estimator == "flexible_cos" and (
        "cos_ref" not in controls or set(controls) - set(FLEXIBLE_CONTROLS)
    ):
        raise PreregistrationError(
            f"estimator flexible_cos takes control cos_ref (its spline), optionally "
            f"with log_kl; got {controls}"
        )
    if primary.estimator in GATED and set(controls) - {"none"}:
        raise PreregistrationError(
            f"estimator {primary.estimator} is bare (control: none): what it "
            f"would hold fixed follows from the direction; got {controls}"
        )
    for key in ("sesoi", "equivalence_margin"):
        value = getattr(primary, key)
        if value is not None and not value > 0:
            raise PreregistrationError(f"primary {key} must be a positive number")
    if primary.strength is None:
        raise PreregistrationError("primary strength must be a number (the s it is read at)")
    if primary.predictor == "probit_auroc" and primary.estimator != "flexible_cos":
        raise PreregistrationError("probit_auroc is a predictor of estimator flexible_cos")
    return primary


def _git(path: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=path.parent, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def registered(data: bytes) -> bytes:
    """The registered part of a pre-registration's bytes: up to the line
    :data:`DEVIATIONS_MARKER` (the whole file where there is none)."""
    at = data.find(b"\n" + DEVIATIONS_MARKER)
    return data if at < 0 else data[: at + 1]


def load_preregistration(path: str | Path) -> Preregistration:
    path = Path(path)
    if not path.exists():
        raise PreregistrationError(f"no pre-registration at {path}")
    data = registered(path.read_bytes())
    primary = parse_primary(data.decode("utf-8"))
    dirty = _git(path, "status", "--porcelain", "--", path.name)
    commit = _git(path, "log", "-1", "--format=%H", "--", path.name) if dirty == "" else None
    return Preregistration(path, hashlib.sha256(data).hexdigest(), primary, commit or None)


def study_hash(config: IdentifyStudyConfig) -> str:
    """The hash of the study a pre-registration is written for: the config with the
    held-out concept set, so the development run's config gives the same hash as the
    held-out run it pre-registers. ``concepts.synsets`` and ``concepts.limit`` are left
    out: a study takes its concepts from the split (``study.with_concepts``, which sets
    them), so the config a run stores, and a resume reads back, has the hash of the
    config it was started with. ``identify.shard`` is left out too: every shard of a
    sharded held-out set is bound to the same study (``identify.shard_size`` is in it)."""
    ident = config.identify.model_copy(update={"concept_set": "heldout", "shard": None})
    concepts = config.concepts.model_copy(update={"synsets": None, "limit": None})
    return config.model_copy(update={"identify": ident, "concepts": concepts}).config_hash()


def check_binding(prereg: Preregistration, config: IdentifyStudyConfig) -> None:
    """Refuse a held-out run that differs from what the pre-registration was written for:
    its config (any --set, --concepts, --quick, --model or split change moves the hash),
    its code (changed since ``code_commit``), or an outcome or strength it does not
    measure."""
    primary = prereg.primary
    missing = [k for k in BINDING_KEYS if not getattr(primary, k)]
    if missing:
        raise PreregistrationError(
            f"{prereg.path} names no {' and no '.join(missing)}: a held-out run is bound to "
            f"the config and code the pre-registration was written for; add "
            f"`config_hash: {study_hash(config)}` and `code_commit: <the commit of the code>` "
            "to its primary block and commit it"
        )
    found = study_hash(config)
    if str(primary.config_hash) != found:
        raise PreregistrationError(
            f"this run's config (hash {found}) is not the one the pre-registration was written "
            f"for ({primary.config_hash}): run the committed config as it is, with no "
            "--set, --concepts, --quick or --model"
        )
    commit = str(primary.code_commit)
    _check_imported_code(prereg.path)
    changed = _git(prereg.path, "diff", "--name-only", commit, "--", *_code_paths(prereg.path))
    if changed is None:
        raise PreregistrationError(f"code_commit {commit} is not a commit of this repository")
    own = _git(prereg.path, "ls-files", "--full-name", prereg.path.name)
    files = [f for f in (changed or "").splitlines() if f and f != own]
    if files:
        raise PreregistrationError(
            f"the code changed since code_commit {commit[:12]} ({len(files)} files, e.g. "
            f"{files[0]}): run the held-out study on the code it was pre-registered for"
        )
    strengths = [float(x) for x in config.identify.strengths]
    if primary.at_strength not in strengths:
        raise PreregistrationError(
            f"the primary is defined at strength {primary.strength} but this run measures "
            f"the likelihood at {strengths} only: add {primary.strength} to "
            "identify.strengths"
        )
    check_design_table(prereg, config)


def check_design_table(prereg: Preregistration, config: IdentifyStudyConfig) -> None:
    """The design gate on the confirmatory path: a pre-registration whose primary is v3's
    (``estimator``: one of :data:`GATED`) or that names a ``design_table`` must name one (the
    committed ``steer-eval identify simulate --json`` output, a path from the repository
    root) for this study's hash, whose gate passed (``failures`` empty)."""
    primary = prereg.primary
    table = primary.design_table
    if not table:
        if primary.estimator in GATED:
            raise PreregistrationError(
                f"{prereg.path} names no design_table: a v3 primary is run only on a grid "
                "the simulation passed; run `steer-eval identify simulate --json` on this "
                "config, commit its output and name it as design_table in the primary block"
            )
        return
    path = Path(_git(prereg.path, "rev-parse", "--show-toplevel") or ".") / str(table)
    try:
        design = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PreregistrationError(f"design_table {table} cannot be read: {exc}") from None
    found = study_hash(config)
    if design.get("study_hash") != found:
        raise PreregistrationError(
            f"design_table {table} simulated study {design.get('study_hash')}, not this one "
            f"({found}): simulate this config again and commit the table"
        )
    if design.get("failures"):
        raise PreregistrationError(
            f"design_table {table}: the simulation's gate refused this grid "
            f"({design['failures'][0]}; {len(design['failures'])} in all)"
        )


def binding(prereg: Preregistration, config: IdentifyStudyConfig) -> dict[str, str]:
    """What a held-out run was checked against (its ledger entries carry it): this
    config's study hash and the pre-registration's ``code_commit``."""
    return {"config_hash": study_hash(config), "code_commit": str(prereg.primary.code_commit)}


def check_resume(
    prereg: Preregistration, config: IdentifyStudyConfig, run_id: str, started_sha256: str | None
) -> dict[str, str]:
    """Refuse to resume held-out run ``run_id`` unless what a new run is checked against
    still holds: the pre-registration is the one the run started under
    (``started_sha256``) and committed unchanged, and its binding (:func:`check_binding`:
    the config's hash, the code since ``code_commit``, the strength). Earlier scorings are
    not counted again: a resume finishes the scoring its run started. Returns the binding
    checked."""
    where = f"cannot resume held-out run {run_id}"
    if started_sha256 and prereg.sha256 != started_sha256:
        raise PreregistrationError(
            f"{where}: the pre-registration {prereg.path} changed since the run started "
            f"(sha256 {started_sha256[:12]} then, {prereg.sha256[:12]} now): restore the "
            "version it started under and resume, or score the held-out set under the new "
            "pre-registration in a new run"
        )
    if prereg.commit is None:
        raise PreregistrationError(
            f"{where}: {prereg.path} is not committed unchanged: restore the committed "
            f"version (git checkout -- {prereg.path.name}) and resume"
        )
    try:
        check_binding(prereg, config)
    except PreregistrationError as exc:
        raise PreregistrationError(
            f"{where}: {exc} (a resume is held to the binding a new run is)"
        ) from None
    return binding(prereg, config)


def _check_imported_code(prereg_path: Path) -> None:
    """The code this process runs must be the checkout that holds the pre-registration:
    the binding compares that checkout's files with ``code_commit``, so a run from a
    checkout of the bound commit that imports another (an editable install of the main
    checkout, say) would pass the check while running other code. A repository without
    the package (a test's scratch repository) has nothing to compare."""
    import experiments

    root = _git(prereg_path, "rev-parse", "--show-toplevel")
    if not root or not (Path(root) / "experiments" / "__init__.py").is_file():
        return
    running = Path(experiments.__file__).resolve().parent.parent
    if running != Path(root).resolve():
        raise PreregistrationError(
            f"this process runs the code in {running}, but the pre-registration's checkout "
            f"is {root}: run the held-out study from that checkout's code (cd there and set "
            f"PYTHONPATH={root}, or install it there), so that the code the binding checks is "
            "the code that runs"
        )


def _code_paths(prereg_path: Path) -> list[str]:
    root = _git(prereg_path, "rev-parse", "--show-toplevel")
    base = Path(root) if root else prereg_path.parent
    return [str(base / p) for p in CODE_PATHS if (base / p).exists()]


# One line of a held-out ledger as JSON holds it (``ledger_entry``'s keys; open, because a
# scoring adds its own: shard, binding, devices, primaries)
LedgerEntry = dict[str, object]

# What a scoring covers: the whole held-out set (None: an unsharded run), one shard (its
# number), or the primary scored once on the pooled shards.
Scope = int | str | None
POOLED = "pooled"


def scope_of(entry: LedgerEntry) -> Scope:
    """What a ledger entry (or an MLflow run's row) scored: ``pooled``, its shard, or None
    (the whole held-out set; every entry written before shards existed)."""
    if entry.get("status") == POOLED:
        return POOLED
    shard = entry.get("shard")
    return None if shard is None or shard == "" else int(str(shard))


def conflicts(earlier: Scope, new: Scope) -> bool:
    """Whether an earlier scoring of ``earlier`` spends what a new one of ``new`` would
    score: the same shard, the pooled primary twice, or any scoring beside one of the
    whole set (which scored every concept and the primary)."""
    return earlier is None or new is None or earlier == new


def read_ledgers(paths: list[Path], sha256: str) -> list[LedgerEntry]:
    """The entries of this pre-registration in the ledger files that exist."""
    found = []
    for ledger in paths:
        if not ledger.is_file():
            continue
        for line in ledger.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                if entry.get("prereg_sha256") == sha256:
                    found.append({**entry, "where": str(ledger)})
    return found


def check_listed(
    prereg: Preregistration | None, config: IdentifyStudyConfig, heldout: list[str]
) -> None:
    """A listed run (``identify.concept_set: listed``) may take held-out concepts only
    once their pre-registration's primary is pooled and scored (a ``pooled`` entry in a
    committed ledger under ``identify.shards_dir`` or in the local one): before that,
    any number computed on them is a look at the held-out set."""
    overlap = sorted(set(config.concepts.synsets or []) & set(heldout))
    if not overlap:
        return
    named = f"{len(overlap)} listed concepts ({', '.join(overlap[:3])}, ...) are held out"
    if prereg is None:
        raise PreregistrationError(
            f"{named} by the split, and identify.preregistration names no pre-registration: "
            "name the one whose held-out set they belong to"
        )
    ledgers = [Path(config.results_dir) / LEDGER]
    ledgers += sorted(Path(config.identify.shards_dir).glob(f"*/{POOLED}/{LEDGER}"))
    if not any(e.get("status") == POOLED for e in read_ledgers(ledgers, prereg.sha256)):
        raise PreregistrationError(
            f"{named} under {prereg.path}, whose primary is not pooled and scored yet: run "
            "them after `steer-eval identify pool`, or list development concepts"
        )


def heldout_scorings(
    sha256: str,
    experiment: str,
    results_dir: str | Path,
    scope: Scope = None,
    ledgers: tuple[Path, ...] = (),
) -> list[LedgerEntry]:
    """Earlier held-out scorings of this pre-registration (MLflow, the local ledger and
    ``ledgers``: the committed copies of shards' ledger lines) that conflict with a new
    scoring of ``scope`` (:func:`conflicts`)."""
    found = [
        e
        for e in read_ledgers([Path(results_dir) / LEDGER, *ledgers], sha256)
        if conflicts(scope_of(e), scope)
    ]
    from experiments import tracking

    c = tracking.client()
    exp = c.get_experiment_by_name(experiment)
    if exp is not None:
        runs = c.search_runs(
            [exp.experiment_id],
            filter_string=(
                f"tags.`identify.prereg_sha256` = '{sha256}' and "
                "tags.`identify.concept_set` = 'heldout'"
            ),
        )
        known = {f.get("run_id") for f in found}
        found += [
            {
                "run_id": r.info.run_id,
                "where": "mlflow",
                "forced": r.data.tags.get("identify.forced"),
                "shard": r.data.tags.get("identify.shard"),
            }
            for r in runs
            if r.info.run_id not in known
            and conflicts(scope_of({"shard": r.data.tags.get("identify.shard")}), scope)
        ]
    # one line per run (its first entry), and per pooled scoring
    seen: set[object] = set()
    unique = []
    for f in found:
        key = f.get("run_id") or (POOLED, f.get("at"))
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def check_heldout(
    prereg: Preregistration,
    experiment: str,
    results_dir: str | Path,
    force: bool,
    config: IdentifyStudyConfig | None = None,
    scope: Scope = None,
    ledgers: tuple[Path, ...] = (),
) -> list[LedgerEntry]:
    """Refuse a held-out run that is not allowed (see the module docstring); return the
    earlier scorings, started or finished (non-empty only when forced), of what this one
    scores (``scope``: the whole set, shard K, or the pooled primary)."""
    if prereg.commit is None:
        raise PreregistrationError(
            f"{prereg.path} is not committed unchanged: commit the pre-registration before "
            "the held-out run"
        )
    if config is not None:
        check_binding(prereg, config)
    earlier = heldout_scorings(prereg.sha256, experiment, results_dir, scope, ledgers)
    if earlier and not force:
        what = (
            "the held-out concepts were"
            if scope is None
            else "the pooled primary was"
            if scope == POOLED
            else f"shard {scope} of the held-out concepts was"
        )
        names = ", ".join(str(e.get("run_id") or e.get("status")) for e in earlier)
        raise PreregistrationError(
            f"{what} already scored under this pre-registration "
            f"({prereg.sha256[:12]}: {names}); "
            "write a new pre-registration, or pass --force to score them again (recorded as "
            "forced, not confirmatory)"
        )
    return earlier


def ledger_entry(
    run_id: str | None,
    prereg: Preregistration | None,
    forced: bool,
    status: str,
    **extra: object,
) -> LedgerEntry:
    """One line of the held-out ledger: ``started`` (the intent to score, written before
    the first held-out cell), ``resumed`` (the checks of a new run passed again),
    ``scored``, or ``pooled`` (the primary on the pooled shards; no run of its own)."""
    return {
        "run_id": run_id,
        "prereg_sha256": prereg.sha256 if prereg else None,
        "forced": forced,
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "status": status,
        **extra,
    }


def record_heldout(results_dir: str | Path, entry: LedgerEntry) -> None:
    """Append ``entry`` to the local ledger (fsynced: the source of truth), then mirror
    its run's entries to the run in MLflow (:func:`mirror_ledger`)."""
    path = Path(results_dir) / LEDGER
    path.parent.mkdir(parents=True, exist_ok=True)
    append_jsonl(path, [entry])
    if entry.get("run_id"):
        mirror_ledger(str(entry["run_id"]), results_dir)


def run_ledger(results_dir: str | Path, run_id: str) -> list[LedgerEntry]:
    """The local ledger's entries of one run, in the order they were written."""
    return [e for e in read_jsonl(Path(results_dir) / LEDGER) if e.get("run_id") == run_id]


def mirror_ledger(run_id: str, results_dir: str | Path) -> bool:
    """The run's local ledger entries on its MLflow run (open or finished; it is not
    reopened): a tag ``steer_eval.ledger.<status>`` per status (the latest entry of it, as
    JSON) and the artefact ``ledger.jsonl`` (all of them, rewritten whole). The local file
    is written first and stays the source of truth: a mirror that fails is warned about,
    changes nothing there, and the run's next entry mirrors every entry again. Returns
    whether it mirrored."""
    from experiments import tracking

    entries = run_ledger(results_dir, run_id)
    try:
        tracking.set_tags(
            run_id, {f"{LEDGER_TAG}.{e['status']}": json.dumps(e, sort_keys=True) for e in entries}
        )
        text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries)
        tracking.client().log_text(run_id, text, LEDGER_ARTEFACT)
    except Exception as exc:  # MLflow unreachable, the run gone: the local ledger holds it
        logging.getLogger(__name__).warning(
            "the held-out ledger's entries of run %s are in %s but not on its MLflow run "
            "(%s); the run's next ledger entry mirrors them again",
            run_id, Path(results_dir) / LEDGER, exc,
        )  # fmt: skip
        return False
    return True
