"""A held-out set in shards: each shard one complete identify run, the primary scored once
on the pooled table.

A confirmatory set larger than one working session (``identify.shard_size``) is cut, in
the held-out split's order, into shards of that many concepts (:func:`shard_concepts`).
``steer-eval identify run --heldout --shard K`` runs shard K on the bound code and config
(the pre-registration's study hash leaves ``identify.shard`` out, so every shard has the
same binding), with its own ledger entries: one scoring per (pre-registration, shard).
On finish the shard's ``directions.csv`` and its ledger lines are copied to
``<identify.shards_dir>/<experiment>/shard-<K>/`` (:func:`keep_shard`), a folder that is
committed: ``results/`` and the MLflow store stay on the machine that ran the shard, and
the next working window (perhaps on another machine) must find every finished shard.

``steer-eval identify pool`` reads those folders (:func:`read_shards`), refuses while a
shard is missing or was run under another pre-registration or binding, and scores the
primary once (:func:`pool`: ``primary.primary_result`` on the concatenated directions,
in shard order, which is the held-out order an unsharded run tabulates), with the device
each concept was measured on as a concept-level factor (counts beside the estimate), and
a ``pooled`` ledger entry. The pooled run (``identify/pooled.py``) checks and reads the
shards once (:func:`pool_inputs`) before its MLflow run opens, then scores them
(:func:`score_pool`); :func:`pool` is the two without a run.

Longer than 500 lines: the sharded protocol is one contract, from the partition through
the kept folders and their checks to the one pooled scoring and its answer; split, the
checks a shard passes and those the pool repeats would drift apart.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from experiments.answer import estimate_of
from experiments.identify.estimation.compare import read_directions
from experiments.identify.heldout.prereg import (
    LEDGER,
    POOLED,
    LedgerEntry,
    Preregistration,
    PreregistrationError,
    check_heldout,
    ledger_entry,
    primaries,
    record_heldout,
    run_ledger,
)
from experiments.record import PrimaryResult, PrimarySpec
from experiments.record.pooled import (
    POOLED_FORMAT,
    FloorCheck,
    PooledPrimary,
    PooledRecord,
    PooledShard,
    PrimaryReading,
)
from experiments.rundir import RunDir, append_jsonl, atomic_write_text, read_jsonl

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from experiments.config import IdentifyStudyConfig
    from experiments.identify.estimation.cells import StudyTables
    from experiments.identify.estimation.multiplicity import Reading
    from metrics.intervals import Interval
    from steering.models import LoadedModel

SHARD_FILE = "shard.json"  # the shard's run id, concepts and devices
RELIABILITY_FILE = "reliability.json"  # the shard record's outcome reliabilities
# Per built-direction population, measure and concept, the demeaned split-half sums the
# within-concept reliability is computed from (stats.reliability_of_sums): what the pool
# needs to check the pre-registration's reliability floor over every shard.
RELIABILITY_SUMS = "reliability_sums.npz"
FLOOR_MEASURE = "effect"  # the floor is the likelihood outcome's reliability
POOLED_RECORD = "pooled.json"
POOLED_ANSWER = "answer.md"


def n_shards(n_concepts: int, size: int) -> int:
    """How many shards of ``size`` the held-out set makes (the last may be smaller)."""
    if size < 1:
        raise ValueError(f"a shard holds at least one concept, not {size}")
    return math.ceil(n_concepts / size)


def shard_concepts(held: list[str], size: int, k: int) -> list[str]:
    """Shard ``k``: the held-out concepts ``k·size`` to ``(k+1)·size``, in the split's order."""
    n = n_shards(len(held), size)
    if not 0 <= k < n:
        raise ValueError(
            f"shard {k} is not one of 0..{n - 1} ({len(held)} held-out concepts in shards "
            f"of {size})"
        )
    return held[k * size : (k + 1) * size]


def shards_root(config: IdentifyStudyConfig) -> Path:
    """``<identify.shards_dir>/<experiment>``: the committed copies of an experiment's shards."""
    return Path(config.identify.shards_dir) / config.experiment


def shard_folder(config: IdentifyStudyConfig, k: int) -> Path:
    return shards_root(config) / f"shard-{k}"


def committed_ledgers(config: IdentifyStudyConfig) -> tuple[Path, ...]:
    """The committed ledger lines of every shard and of the pooled scoring, which count
    as earlier scorings wherever the local ledger and the MLflow store are gone."""
    root = shards_root(config)
    return (*sorted(root.glob("shard-*/" + LEDGER)), root / POOLED / LEDGER)


def device_of(lm: LoadedModel) -> str:
    """Where a loaded model computes: device type and dtype, e.g. ``cpu/float32``."""
    return f"{lm.device.type}/{str(lm.dtype).removeprefix('torch.')}"


def keep_ledger(config: IdentifyStudyConfig, run_id: str, k: int) -> Path:
    """Append this run's ledger lines to shard ``k``'s committed folder (every run of the
    shard, kept across forced re-scorings and aborted runs, each line once); the folder."""
    folder = shard_folder(config, k)
    folder.mkdir(parents=True, exist_ok=True)
    entries = [*read_jsonl(folder / LEDGER), *run_ledger(config.results_dir, run_id)]
    unique = dict.fromkeys(json.dumps(e, sort_keys=True) for e in entries)
    atomic_write_text(folder / LEDGER, "".join(line + "\n" for line in unique))
    return folder


def keep_shard(
    config: IdentifyStudyConfig,
    run_id: str,
    run_dir: Path,
    k: int,
    concepts: list[str],
    reliability: Mapping[str, Interval] | None = None,
    sums: Mapping[str, np.ndarray] | None = None,
) -> Path:
    """Copy a finished shard's ``directions.csv`` and its ledger lines (every run of this
    shard, kept across forced re-scorings) to its committed folder, with ``shard.json``
    (the run, its concepts, the devices its sessions ran on) and, given the record's
    ``outcome_reliability``, ``reliability.json``: the split-half reliabilities need the
    per-pair rows that stay in the run folder, and the pre-registration reads them; given
    ``sums`` (:func:`reliability_sums`), ``reliability_sums.npz``, from which the pool
    computes the reliabilities over every shard. Returns the folder."""
    folder = keep_ledger(config, run_id, k)
    source = Path(run_dir) / RunDir.DIRECTIONS
    atomic_write_text(folder / RunDir.DIRECTIONS, source.read_text(encoding="utf-8"))
    entries = run_ledger(config.results_dir, run_id)
    devices = sorted({str(e["device"]) for e in entries if e.get("device")})
    info = {
        "shard": k,
        "shard_size": config.identify.shard_size,
        "run_id": run_id,
        "experiment": config.experiment,
        "concepts": concepts,
        "devices": devices,
    }
    atomic_write_text(folder / SHARD_FILE, json.dumps(info, indent=1) + "\n")
    if reliability is not None:
        kept_reliability = {key: r.to_dict() for key, r in reliability.items()}
        atomic_write_text(
            folder / RELIABILITY_FILE, json.dumps(kept_reliability, indent=1, default=str) + "\n"
        )
    if sums:
        partial = folder / (RELIABILITY_SUMS + ".partial")
        # numpy types savez's keyword arrays against its own allow_pickle: call it untyped.
        savez: Callable[..., None] = np.savez_compressed
        with partial.open("wb") as f:
            savez(f, **dict(sums))
        partial.replace(folder / RELIABILITY_SUMS)
    return folder


def reliability_sums(tables: StudyTables) -> dict[str, np.ndarray]:
    """Per built-direction population (``variance.BUILT_FAMILIES``), measure (the
    likelihood effect, AUROC) and concept, the demeaned split-half sums; keyed
    ``population|measure|concept``."""
    from experiments.identify.estimation.stats import demeaned_halves
    from experiments.identify.estimation.variance import BUILT_FAMILIES, practitioner_rows

    out = {}
    for population, families in BUILT_FAMILIES.items():
        rows = practitioner_rows(tables.directions, FLOOR_MEASURE, families=families)
        for measure in (FLOOR_MEASURE, "auroc"):
            for concept, sums in demeaned_halves(tables.halves_for(measure, rows)).items():
                out[f"{population}|{measure}|{concept}"] = sums
    return out


def floor_check(
    folders: Mapping[int, Path], population: str, floor: float, n_boot: int, seed: int
) -> FloorCheck:
    """The likelihood's within-concept reliability among ``population``'s directions,
    pooled over the shards that kept their sums and per shard, with the shards that
    kept none, against the pre-registration's ``floor``."""
    from experiments.identify.estimation.stats import reliability_of_sums

    prefix = f"{population}|{FLOOR_MEASURE}|"
    per_shard: dict[int, dict[str, np.ndarray]] = {}
    for k, folder in folders.items():
        path = folder / RELIABILITY_SUMS
        if path.is_file():
            with np.load(path) as kept:
                per_shard[k] = {
                    n[len(prefix) :]: kept[n] for n in kept.files if n.startswith(prefix)
                }
    pooled = reliability_of_sums(
        {c: v for sums in per_shard.values() for c, v in sums.items()}, n_boot=n_boot, seed=seed
    )
    return FloorCheck(
        population=population,
        pooled=pooled,
        by_shard={
            str(k): reliability_of_sums(v, n_boot=n_boot, seed=seed) for k, v in per_shard.items()
        },
        shards_without=sorted(set(folders) - set(per_shard)),
        floor=floor,
        met=pooled.estimate is not None and pooled.estimate >= floor,
    )


@dataclass(frozen=True)
class ShardRun:
    """One finished shard as its committed folder holds it."""

    shard: int
    run_id: str
    directions: pd.DataFrame
    device: str  # the devices its sessions ran on, joined by "+" when more than one
    forced: bool  # a forced (re-)scoring: the pooled result is then not confirmatory


def read_shards(
    config: IdentifyStudyConfig, held: list[str], prereg: Preregistration, bound: dict[str, str]
) -> list[ShardRun]:
    """Every shard of the held-out set ``held`` from its committed folder, or a
    PreregistrationError naming the shards not finished there and those run under another
    pre-registration, binding or partition."""
    size = config.identify.shard_size
    if size is None:
        raise PreregistrationError(
            f"{config.name} has no identify.shard_size: only a sharded held-out set is pooled"
        )
    n = n_shards(len(held), size)
    missing: list[int] = []
    other: list[str] = []
    found: list[ShardRun] = []
    for k in range(n):
        folder = shard_folder(config, k)
        files = [folder / SHARD_FILE, folder / RunDir.DIRECTIONS, folder / LEDGER]
        if not all(f.is_file() for f in files):
            missing.append(k)
            continue
        run_id = str(json.loads(files[0].read_text(encoding="utf-8"))["run_id"])
        mine = [e for e in read_jsonl(files[2]) if e.get("run_id") == run_id]
        if not any(e.get("status") == "scored" for e in mine):
            missing.append(k)
            continue
        checked = [e for e in mine if e.get("status") in ("started", "resumed")]
        why = ""
        if not checked:
            why = "no started entry"
        elif any(e.get("prereg_sha256") != prereg.sha256 for e in checked):
            why = "another pre-registration"
        elif any(e.get("binding") != bound for e in checked):
            seen = next(e.get("binding") for e in checked if e.get("binding") != bound)
            why = f"binding {seen}, not {bound}"
        frame = read_directions(files[1])
        if not why and list(dict.fromkeys(frame["concept"])) != shard_concepts(held, size, k):
            why = f"its concepts are not shard {k}'s of {len(held)} in shards of {size}"
        if why:
            other.append(f"shard {k} (run {run_id}: {why})")
            continue
        devices = sorted({str(e["device"]) for e in mine if e.get("device")}) or ["unknown"]
        forced = any(bool(e.get("forced")) for e in read_jsonl(files[2]))
        found.append(ShardRun(k, run_id, frame, "+".join(devices), forced))
    problems = []
    if missing:
        problems.append(
            f"shard{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of 0..{n - 1} "
            f"not finished in {shards_root(config)} (run `steer-eval identify run --heldout "
            f"--shard K` for each, and commit its folder)"
        )
    if other:
        problems.append(
            f"{'; '.join(other)} ran on another pre-registration, config or code than this "
            f"one ({prereg.sha256[:12]}, {bound}): run those shards again on the bound code "
            "and config (--force)"
        )
    if problems:
        raise PreregistrationError("cannot pool the held-out shards: " + "; ".join(problems))
    return found


def pooled_directions(shards: list[ShardRun]) -> pd.DataFrame:
    """The shards' directions tables, concatenated in shard order, with each row's
    ``shard`` and ``device`` (a concept-level factor: a concept is measured in one shard)."""
    frames = [s.directions.assign(shard=s.shard, device=s.device) for s in shards]
    return pd.concat(frames, ignore_index=True)


def score_pooled(
    frame: pd.DataFrame,
    primary: PrimarySpec,
    config: IdentifyStudyConfig,
    confidence: float | None = None,
) -> PrimaryResult:
    """The pre-registered primary on a pooled directions table, as a run scores it
    (``primary.primary_result`` with the config's bootstrap settings; ``confidence``
    where Holm's procedure reads it at another level)."""
    from experiments.identify.estimation.cells import StudyTables
    from experiments.identify.estimation.primary import primary_result

    criteria = config.criteria
    return primary_result(
        StudyTables(directions=frame),
        primary,
        criteria.n_boot,
        config.seed,
        confidence=criteria.confidence if confidence is None else confidence,
    )


def reliability_floors(
    config: IdentifyStudyConfig, primary: PrimarySpec, shards: list[ShardRun]
) -> dict[str, FloorCheck]:
    """Per primary with a built-direction population, the pre-registration's floor
    (``reliability_floor``) beside the likelihood's pooled reliability on its rows; empty
    where the block names no floor."""
    from experiments.identify.estimation.variance import BUILT_FAMILIES

    floor = primary.reliability_floor
    if floor is None:
        return {}
    folders = {s.shard: shard_folder(config, s.shard) for s in shards}
    n_boot, seed = config.criteria.n_boot, config.seed
    return {
        spec.label(): floor_check(folders, str(spec.estimator), floor, n_boot, seed)
        for spec in primaries(primary)
        if spec.estimator in BUILT_FAMILIES
    }


def score_primaries(
    frame: pd.DataFrame,
    primary: PrimarySpec,
    config: IdentifyStudyConfig,
    floors: Mapping[str, FloorCheck] | None = None,
) -> list[Reading]:
    """The primary and its co-primaries (``prereg.primaries``) on the pooled table, read
    together by Holm's procedure at the block's ``alpha`` (``identify/estimation/multiplicity.py``);
    a primary whose rows miss the reliability floor (``floors``) is ``uninformative``,
    whatever its interval, and settles nothing."""
    from experiments.identify.estimation.multiplicity import holm

    def score(spec: PrimarySpec, confidence: float) -> PrimaryResult:
        result = score_pooled(frame, spec, config, confidence)
        floor = (floors or {}).get(spec.label())
        return uninformative(result) if floor is not None and not floor.met else result

    return holm(primaries(primary), score, primary.family_alpha)


def uninformative(result: PrimaryResult) -> PooledPrimary:
    """A primary whose rows miss the reliability floor: ``uninformative``, with what its
    interval read beside (``read``)."""
    return PooledPrimary.model_validate(
        {**result.model_dump(exclude_unset=True), "verdict": "uninformative",
         "read": result.verdict}
    )  # fmt: skip


@dataclass(frozen=True)
class PoolInputs:
    """What a pooled scoring was checked against and reads: the earlier scorings of this
    pre-registration (a forced one has some) and every finished shard."""

    earlier: list[LedgerEntry]
    shards: list[ShardRun]


def pool_inputs(
    config: IdentifyStudyConfig,
    held: list[str],
    prereg: Preregistration,
    bound: dict[str, str],
    force: bool,
) -> PoolInputs:
    """The checks of a held-out run (committed pre-registration, binding; one pooled
    scoring per pre-registration unless ``force``), then the shards, each read once; a
    PreregistrationError names what refuses."""
    earlier = check_heldout(
        prereg,
        config.experiment,
        config.results_dir,
        force,
        config=config,
        scope=POOLED,
        ledgers=committed_ledgers(config),
    )
    return PoolInputs(earlier, read_shards(config, held, prereg, bound))


def pool(
    config: IdentifyStudyConfig,
    held: list[str],
    prereg: Preregistration,
    bound: dict[str, str],
    force: bool,
) -> PooledRecord:
    """Score the primary once on the pooled shards (:func:`pool_inputs`, then
    :func:`score_pool`, with no MLflow run); returns the record."""
    return score_pool(config, prereg, bound, pool_inputs(config, held, prereg, bound, force))


def score_pool(
    config: IdentifyStudyConfig,
    prereg: Preregistration,
    bound: dict[str, str],
    inputs: PoolInputs,
    run_id: str | None = None,
) -> PooledRecord:
    """Score the primary on the checked shards: writes ``pooled/pooled.json`` and
    ``answer.md`` beside them and a ``pooled`` ledger entry (local ledger and the
    committed folder; mirrored on the pooled run ``run_id`` when there is one). Returns
    the record."""
    earlier, shards = inputs.earlier, inputs.shards
    frame = pooled_directions(shards)
    floors = reliability_floors(config, prereg.primary, shards)
    co = bool(prereg.primary.co_primaries)
    readings = score_primaries(frame, prereg.primary, config, floors) if co else []
    primary = readings[0].result if co else score_pooled(frame, prereg.primary, config)
    forced = bool(earlier) or any(s.forced for s in shards)
    firsts = frame.drop_duplicates("concept")
    record = PooledRecord(
        format=POOLED_FORMAT,
        version=1,
        experiment=config.experiment,
        label="forced re-scoring: not confirmatory"
        if forced
        else "confirmatory: the primary analysis on the pooled held-out shards, first scoring",
        forced=forced,
        preregistration=prereg.to_dict(),
        binding=bound,
        shard_size=config.identify.shard_size,
        shards=[pooled_shard(s) for s in shards],
        n_concepts=int(frame["concept"].nunique()),
        devices=dict(sorted(Counter(str(d) for d in firsts["device"]).items())),
        concept_device={
            str(c): str(d) for c, d in zip(firsts["concept"], firsts["device"], strict=True)
        },
        primary=PooledPrimary.model_validate(primary.model_dump(exclude_unset=True)),
        **({"primaries": [r.recorded() for r in readings]} if co else {}),
        **({"reliability_floor": floors} if floors else {}),
    )
    folder = shards_root(config) / POOLED
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record.model_dump(mode="json", exclude_unset=True), indent=1)
    atomic_write_text(folder / POOLED_RECORD, text + "\n")
    atomic_write_text(folder / POOLED_ANSWER, pooled_markdown(record))
    entry = ledger_entry(
        run_id,  # the pooled run (identify/pooled.py); None: the files alone
        prereg,
        forced,
        POOLED,
        binding=bound,
        shards={str(s.shard): s.run_id for s in shards},
        primary=primary.verdict,
        **({"primaries": {r.name: r.verdict for r in readings}} if co else {}),
        devices=record.devices,
    )
    record_heldout(config.results_dir, entry)
    append_jsonl(folder / LEDGER, [entry])
    return record


def pooled_shard(shard: ShardRun) -> PooledShard:
    """A shard as the pooled record lists it."""
    return PooledShard(
        shard=shard.shard, run_id=shard.run_id, device=shard.device, forced=shard.forced,
        n_concepts=int(shard.directions["concept"].nunique()),
    )  # fmt: skip


def _primaries_lines(readings: list[PrimaryReading], alpha: float) -> list[str]:
    """The co-primaries as Holm's procedure read them (none without co-primaries)."""
    if not readings:
        return []
    return [
        f"Co-primaries, read together by Holm's step-down at family-wise α = {alpha:g}:",
        "",
        "| primary | estimator | slope (interval) | level | Holm step | verdict |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r.name} | {r.estimator} | {estimate_of(r.slope)} | "
            f"{r.confidence:.3f} | {r.holm_step or 'not settled'} | **{r.verdict}** |"
            for r in readings
        ),
        "",
    ]


def pooled_markdown(record: PooledRecord) -> str:
    """The pooled answer: the verdict, its interval, the concepts per device, the shards."""
    primary, spec = record.primary, record.primary.spec
    devices = ", ".join(f"{d}: {n}" for d, n in record.devices.items())
    lines = [
        f"# identify held-out, pooled: {record.experiment}",
        "",
        f"**{record.label}**",
        "",
        f"Primary ({primary.estimator}: {spec.predictor} → {spec.outcome} at "
        f"strength {spec.strength}, hypothesis {spec.hypothesis}): "
        f"{estimate_of(primary.slope)} — **{primary.verdict}**",
        "",
        *_primaries_lines(record.primaries or [], spec.family_alpha),
        f"{record.n_concepts} concepts from {len(record.shards)} shards of "
        f"{record.shard_size}; concepts per device (a concept-level factor): {devices}",
        "",
        "| shard | run | concepts | device | forced |",
        "|---|---|---|---|---|",
        *(
            f"| {s.shard} | {s.run_id} | {s.n_concepts} | {s.device} | "
            f"{'yes' if s.forced else 'no'} |"
            for s in record.shards
        ),
    ]
    return "\n".join(lines) + "\n"
