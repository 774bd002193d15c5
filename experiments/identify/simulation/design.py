"""The design checked by simulation before any compute (``steer-eval identify simulate``).

The configured grid (every direction
:func:`~experiments.identify.stages.manipulations.direction_grid` makes from the
``@manipulation`` registry and the config's levels, v2's iso-cos graded nuisances
included) is run through the bank of toy studies of ``simulate.py``
(:func:`~experiments.identify.simulation.simulate.toy_directions`, one per confound class
of :data:`~experiments.identify.simulation.simulate.CLASSES`, each with no AUROC effect,
and again with the smallest effect of interest planted), and the project's own estimators
are scored on them: ``primary.primary_result`` as pre-registered,
``estimator.flexible_slope`` without covariates, ``linear_cos_slope`` (v1's model),
``matched_pairs``, ``iso_cos`` pooled (beside the nuisance's effect and the dose) and its
bare slope per angle (``without_covariates``). Per estimand and class: bias, coverage of 0
and the rate of "supported" verdicts when AUROC does nothing, power at :data:`SESOI`,
interval width, and each manipulation family's weight.

**Weights** (:func:`family_weights`): the estimator's identifying variation is the AUROC
column left after the fixed effects, the splines and the covariates (Frisch–Waugh–Lovell:
the slope is Σ x̃·y / Σ x̃²). A family's weight is its rows' share of Σ x̃², so the pooled
slope is the weight-averaged family ratios Σ_m x̃·y / Σ_m x̃². For v1's model x̃ is AUROC
less its fit on cos within concepts; for matched pairs each pair's ΔAUROC², split equally
between its two families; iso-cos estimands use iso-cos rows only (weight 1); the
practitioner's estimand AUROC less its concept mean over the directions people build.

**The gate** (:func:`check_design`): a confirmatory grid is refused when its primary's
interval covers its truth in fewer than 90% of the no-effect toys of any class: 0, AUROC's
path through the dose for a primary that does not hold the dose fixed, or, for a
predictive primary that does not hold geometry fixed (the practitioner's), what
detection predicts in that toy (``variance.practitioner_truth``); its power is then read where
that truth is 0 (the ``flat`` class).

**Co-primaries** (identify v4, :func:`simulate`): a pre-registration whose
primary block names ``co_primaries`` has every spec of ``prereg.primaries`` scored on the
same toys, each by its own estimator, and read together by Holm's step-down
(``multiplicity.holm``) at the block's ``alpha``, as ``identify pool`` reads them. Per primary
and class: coverage of its own truth by the interval Holm read it at, bias, how often
each verdict is read and at which Holm step; P1's power is its "supported" rate with the
smallest effect of interest planted, and the equivalence power its "no practical effect"
rate with nothing planted, both stated in ``flat_readout`` (truth 0, the built
directions' AUROC spread as in v3) and given in ``flat`` beside (:func:`power_summary`).
The gate holds every primary to it.

Longer than 500 lines: the design gate is one argument, the toys' estimands, their
truths, the coverage table, the co-primaries read together by Holm and the power curve,
read as one by whoever audits a pre-registration's design.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypedDict, cast

import numpy as np
import pandas as pd

from experiments.identify.estimation.cells import StudyTables, null_rows
from experiments.identify.estimation.estimator import (
    design,
    equal_geometry,
    flexible_slope,
    has_second_half,
    iso_cos,
    linear_cos_slope,
    log_kl,
    matched_pairs,
    partial_out,
)
from experiments.identify.estimation.primary import primary_result
from experiments.identify.estimation.variance import (
    BUILT_FAMILIES,
    auroc_within_sd,
    demean,
    practitioner_rows,
    practitioner_truth,
    toy_overrides,
)
from experiments.identify.simulation.simulate import (
    CLASSES,
    READOUT,
    TOY,
    grid_rows,
    toy_directions,
)
from experiments.record import PrimaryResult, PrimarySpec
from experiments.record.pooled import Components
from metrics.intervals import Interval
from steering.nulls import seeded_rng

if TYPE_CHECKING:
    from pathlib import Path

    from experiments.config import IdentifyConfig, IdentifyStudyConfig
    from experiments.identify.estimation.multiplicity import Reading

# One row of the design table: an estimand (or a named co-primary) in one confound class,
# summarised over the no-effect and planted toys (``_summary``; a co-primary's row adds
# Holm's readings, ``_holm_row``). A TypedDict: the rows are the table's JSON as written,
# and the type checker refuses a key the table does not have ("class" is a keyword).
DesignRow = TypedDict(
    "DesignRow",
    {
        "estimand": str, "class": str, "n_null": int, "not_evaluable": int,
        "truth": float, "bias": float | None, "sd": float | None, "coverage": float | None,
        "coverage_mc_se": float | None, "coverage_0": float | None,
        "supported_0": float | None, "no_practical_0": float | None, "width": float | None,
        "n_planted": int, "planted": float | None, "power": float | None,
        "mean_planted": float | None, "weights": dict[str, float],
        "planted_effect": float, "truth_sd": float | None, "estimator": str | None,
        "question": str | None, "verdicts_null": dict[str, float],
        "verdicts_planted": dict[str, float], "holm_step_null": dict[str, float],
        "holm_step_planted": dict[str, float], "confidence_null": float,
    },
    total=False,
)  # fmt: skip
# One point of the power curve: a number of concepts (and, with co-primaries, a primary
# and its power class) and the row's operating characteristics there.
CurvePoint = TypedDict(
    "CurvePoint",
    {
        "n_concepts": int, "primary": str, "class": str, "power": float | None,
        "width": float | None, "coverage": float | None, "no_practical_0": float | None,
        "n_null": int, "n_planted": int,
    },
    total=False,
)  # fmt: skip

SESOI = 0.25  # nats/token per unit AUROC: the smallest AUROC effect of interest (issue)
COVERAGE_BOUND = 0.90  # the gate: the primary covers 0 in at least this share per class
DEFAULT_PRIMARY = PrimarySpec(  # v2's, when the config names no readable pre-registration
    predictor="auroc",
    outcome="likelihood",
    control=["cos_ref", "log_kl"],
    estimator="flexible_cos",
    hypothesis="positive",
)


# ---------------------------------------------------------------- estimands on one toy


def _fit(fit: Interval | None) -> dict[str, float | None]:
    if fit is None:
        return {"estimate": None, "low": None, "high": None}
    return {"estimate": fit.estimate, "low": fit.low, "high": fit.high}


def estimands(
    frame: pd.DataFrame, primary: PrimarySpec, n_boot: int, seed: int, primary_only: bool = False
) -> dict[str, dict[str, float | None]]:
    """Every estimand's (estimate, low, high) on one directions table, each from the
    project's own estimator (``primary_only``: the pre-registered one alone, what the gate
    reads, for a large confirmatory grid)."""
    tables = StudyTables(frame)
    out = {"primary": _fit(primary_result(tables, primary, n_boot, seed).slope)}
    if primary_only:
        return out
    pooled = tables.pooled()
    y, x = "effect", "auroc"
    out |= {
        "flexible": _fit(flexible_slope(pooled, y, x, n_boot=n_boot, seed=seed)),
        "linear_cos": _fit(linear_cos_slope(pooled, y, x, n_boot=n_boot, seed=seed)),
        "equal_norm_cos_per_concept": _fit(
            flexible_slope(pooled, y, x, n_boot=n_boot, seed=seed, cos_per_group=True)
        ),
        "matched_pairs": _fit(matched_pairs(pooled, y, x, n_boot=n_boot, seed=seed).fit),
    }
    if (pooled["manipulation"] == "isocos").any():
        out["equal_geometry"] = _fit(equal_geometry(pooled, y, x, n_boot=n_boot, seed=seed))
        if has_second_half(pooled):
            out["equal_geometry_uncorrected"] = _fit(
                equal_geometry(pooled, y, x, n_boot=n_boot, seed=seed, corrected=False)
            )
        iso = iso_cos(pooled, y, x, n_boot=n_boot, seed=seed)
        if iso.evaluable:
            out["isocos_pooled"] = _fit(iso.pooled)
            for angle, row in iso.angles.items():
                out[f"isocos_bare_{angle}"] = _fit(row.without_covariates)
    return out


def _share(x_tilde: np.ndarray, fam: np.ndarray) -> dict[str, float]:
    total = float(np.sum(x_tilde**2))
    if total <= 0:
        return {}
    return {m: float(np.sum(x_tilde[fam == m] ** 2) / total) for m in sorted(set(fam))}


def _residual(x: np.ndarray) -> np.ndarray:
    """The first column less its least-squares fit on the others."""
    if x.shape[1] == 1:
        return x[:, 0]
    coef, *_ = np.linalg.lstsq(x[:, 1:], x[:, 0], rcond=None)
    return cast(np.ndarray, x[:, 0] - x[:, 1:] @ coef)


def family_weights(
    frame: pd.DataFrame, estimand: str, covariates: Sequence[str] = (), tolerance: float = 0.02
) -> dict[str, float]:
    """Each manipulation family's share of the estimand's identifying AUROC variation (the
    module docstring), on the rows its estimator uses."""
    frame = frame.assign(log_kl=log_kl(frame["kl"])) if "kl" in frame else frame
    if estimand.startswith(("isocos", "equal_geometry")):
        return {"isocos": 1.0}
    if estimand in BUILT_FAMILIES:  # the practitioner's estimands, each on its families
        rows = practitioner_rows(frame, families=BUILT_FAMILIES[estimand])
        x = demean(rows[["auroc"]].to_numpy(np.float64), rows["cell"].to_numpy())[:, 0]
        return _share(x, rows["manipulation"].to_numpy())
    if estimand == "equal_norm_cos_per_concept":  # its design, each group's cos line out
        data = frame.dropna(subset=["concept", "manipulation", "cos_ref", "effect", "auroc"])
        x, _, _ = design(data, ["auroc"])
        groups = data["concept"].astype(str) + "|" + data["manipulation"].astype(str)
        cos = demean(data[["cos_ref"]].to_numpy(np.float64), groups.to_numpy())[:, 0]
        x = partial_out(x, cos, groups.to_numpy())
        return _share(_residual(x), data["manipulation"].to_numpy())
    if estimand in ("primary", "flexible"):
        cov = list(covariates) if estimand == "primary" else []
        rows = frame[~null_rows(frame)] if estimand == "primary" else frame  # nulls left out
        data = rows.dropna(subset=["concept", "manipulation", "cos_ref", "effect", "auroc", *cov])
        x, _, _ = design(data, ["auroc"], covariates=cov)
        return _share(_residual(x), data["manipulation"].to_numpy())
    if estimand == "linear_cos":
        x = demean(frame[["auroc", "cos_ref"]].to_numpy(np.float64), frame["concept"].to_numpy())
        return _share(_residual(x), frame["manipulation"].to_numpy())
    if estimand == "matched_pairs":
        sums: dict[str, float] = {}
        for _, g in frame.groupby("concept"):
            cos, fam = g["cos_ref"].to_numpy(), g["manipulation"].to_numpy()
            auroc = g["auroc"].to_numpy()
            i, j = np.triu_indices(len(g), k=1)
            keep = (np.abs(cos[i] - cos[j]) <= tolerance) & (fam[i] != fam[j])
            for a, b, w in zip(fam[i[keep]], fam[j[keep]], (auroc[i] - auroc[j])[keep] ** 2,
                               strict=True):  # fmt: skip
                sums[a] = sums.get(a, 0.0) + w / 2
                sums[b] = sums.get(b, 0.0) + w / 2
        total = sum(sums.values())
        return {m: v / total for m, v in sorted(sums.items())} if total else {}
    raise ValueError(f"no weights for estimand {estimand!r}")


# ---------------------------------------------------------------- the bank of toys


def _mc_se(p: float | None, n: int) -> float | None:
    """The Monte Carlo standard error of a share of ``n`` toys."""
    return None if p is None or n == 0 else float(np.sqrt(p * (1 - p) / n))


# Estimands that hold the dose fixed (a log-KL covariate): AUROC acting through the dose
# is not theirs to find. Every other estimand's truth, with nothing planted, is the
# class's mediated effect (simulate.Confound.mediated).
DOSE_HELD = ("primary_v2", "isocos_pooled")


# Primaries whose truth is not a causal 0: they do not hold geometry fixed, so in a toy
# their truth is what detection predicts there, computed per toy (practitioner_truth).
PREDICTIVE = tuple(BUILT_FAMILIES)  # practitioner, practitioner_full_data (v4's P2)
WEIGHED = ("equal_geometry", *PREDICTIVE)  # primaries weighed on their own rows


def power_class(primary: PrimarySpec, readout: bool = False) -> str:
    """The class power is read in: one where the primary's truth is 0 with nothing
    planted (``flat`` for a predictive primary, else ``none``). ``readout`` (v4's
    co-primaries): ``flat_readout``, where the built directions' AUROC spreads as in v3
    (in ``flat`` the full-data directions' spread is a third of v3's, and the power of an
    equivalence reading would follow the toy's geometry rather than the measured data)."""
    if primary.estimator not in PREDICTIVE:
        return "none"
    return "flat_readout" if readout else "flat"


def population_of(primary: PrimarySpec) -> str:
    """The rows a run's variance components are measured on for this primary
    (``variance.components``): its own estimand's."""
    return "practitioner" if primary.estimator in PREDICTIVE else "equal_geometry"


def truth(estimand: str, confound_name: str, primary: PrimarySpec) -> float:
    """What ``estimand`` estimates in a no-effect toy of the class: 0, or AUROC's effect
    through the dose for an estimand that does not hold the dose fixed."""
    held = estimand in DOSE_HELD or (estimand == "primary" and "log_kl" in primary.controls)
    return 0.0 if held else CLASSES[confound_name].mediated()


def _summary(
    fits: list[dict[str, float | None]], planted: list[dict[str, float | None]],
    hypothesis: int, true: float | Sequence[float] = 0.0, margin: float | None = None,
    sesoi: float = SESOI,
) -> DesignRow:  # fmt: skip
    """Over the no-effect toys: bias against the estimand's truth (one number, or one per
    toy for a predictive primary), coverage of the truth and of 0, how often 'supported'
    and 'no practical effect' are read; over the planted toys (``sesoi`` beside the
    truth): power."""
    keep = [None not in f.values() for f in fits]
    ok = [f for f, k in zip(fits, keep, strict=True) if k]
    hit = [f for f in planted if None not in f.values()]
    per_toy = np.broadcast_to(np.asarray(true, dtype=np.float64), (len(fits),))[keep]
    true = float(per_toy.mean()) if len(per_toy) else float(np.mean(true))
    est = np.array([f["estimate"] for f in ok])
    lo, hi = np.array([f["low"] for f in ok]), np.array([f["high"] for f in ok])
    supported = (lo > 0) if hypothesis > 0 else (hi < 0)

    def share(mask: np.ndarray) -> float | None:
        return float(np.mean(mask)) if len(ok) else None

    p_lo = np.array([f["low"] for f in hit])
    p_hi = np.array([f["high"] for f in hit])
    covers = share((lo <= per_toy) & (hi >= per_toy))
    return {
        "n_null": len(ok),
        "not_evaluable": len(fits) - len(ok),
        "truth": true,
        "bias": float((est - per_toy).mean()) if len(ok) else None,
        "sd": float(est.std(ddof=1)) if len(ok) > 1 else None,
        "coverage": covers,
        "coverage_mc_se": _mc_se(covers, len(ok)),
        "coverage_0": share((lo <= 0) & (hi >= 0)),
        "supported_0": share(supported),
        "no_practical_0": share((lo > -margin) & (hi < margin)) if margin else None,
        "width": float((hi - lo).mean()) if len(ok) else None,
        "n_planted": len(hit),
        "planted": true + hypothesis * sesoi,
        "power": float(np.mean(p_lo > 0 if hypothesis > 0 else p_hi < 0)) if hit else None,
        "mean_planted": float(np.mean([f["estimate"] for f in hit])) if hit else None,
    }


def simulate(
    ident: IdentifyConfig,
    primary: PrimarySpec,
    *,
    toys: int = 50,
    seed: int = 0,
    n_boot: int = 499,
    sesoi: float = SESOI,
    n_concepts: int = 25,
    classes: Sequence[str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    toy: dict[str, float] | None = None,
    primary_only: bool = False,
) -> list[DesignRow]:
    """The table: one row per (estimand, class) with the summary of ``toys`` no-effect
    toys and ``toys`` toys with ``sesoi`` planted, and the families' mean weights over the
    no-effect toys. A toy is seeded by (seed, class, planted, index), whatever else runs.
    A primary with ``co_primaries``: on each toy every spec of ``prereg.primaries`` read
    by Holm (:func:`holm_readings`), one row per (primary, class) named by the primary
    (:func:`_holm_row`), and unless ``primary_only`` the other estimands' rows (from the
    first primary's spec). The planted arm plants ``sesoi`` with the first primary's
    sign; each primary reads it by its own hypothesis and margin."""
    from experiments.identify.heldout.prereg import primaries

    specs = primaries(primary) if primary.co_primaries else []
    sign = 1 if primary.hypothesis == "positive" else -1
    covariates = [c for c in primary.controls if c not in ("cos_ref", "none")]
    predictive = primary.estimator in PREDICTIVE
    names = list(classes or CLASSES)
    rows: list[DesignRow] = []
    for ci, name in enumerate(names):
        fits: dict[str, dict[str, list[dict[str, float | None]]]] = {}
        weights: dict[str, list[dict[str, float]]] = {}
        truths: list[float] = []  # a single predictive primary's, per no-effect toy
        # each co-primary's Holm readings and truths, per arm
        readings: dict[str, dict[str, list[Reading]]] = {
            s.label(): {"null": [], "planted": []} for s in specs
        }
        spec_truths: dict[str, dict[str, list[float]]] = {
            s.label(): {"null": [], "planted": []} for s in specs
        }
        for arm, effect in (("null", 0.0), ("planted", sign * sesoi)):
            for i in range(toys):
                rng = seeded_rng(seed, "design", name, arm, i)
                frame = toy_directions(ident, CLASSES[name], rng, effect, n_concepts, toy)
                if specs:
                    read = holm_readings(frame, specs, primary.family_alpha, n_boot, i)
                    for spec, reading in zip(specs, read, strict=True):
                        readings[spec.label()][arm].append(reading)
                        spec_truths[spec.label()][arm].append(spec_truth(spec, frame, name))
                    found = {} if primary_only else estimands(frame, specs[0], n_boot, i)
                    found.pop("primary", None)  # the first primary at 95%: its Holm row instead
                else:
                    if arm == "null" and predictive:
                        families = BUILT_FAMILIES[str(primary.estimator)]
                        truths.append(practitioner_truth(frame, families))
                    found = estimands(frame, primary, n_boot, i, primary_only)
                for est, fit in found.items():
                    fits.setdefault(est, {"null": [], "planted": []})[arm].append(fit)
                if arm == "null":
                    pooled = StudyTables(frame).pooled()
                    for spec in specs:
                        own = str(spec.estimator)
                        weights.setdefault(spec.label(), []).append(
                            family_weights(pooled, own if own in WEIGHED else "primary")
                        )
                    for est in found:
                        own = str(primary.estimator)
                        which = own if est == "primary" and own in WEIGHED else est
                        weights.setdefault(est, []).append(
                            family_weights(pooled, which, covariates)
                        )
                if progress is not None:
                    step = ci * 2 * toys + (arm == "planted") * toys + i + 1
                    progress(f"{name} ({arm})", step, len(names) * 2 * toys)
        for spec in specs:
            row = _holm_row(spec, name, readings[spec.label()], spec_truths[spec.label()], sign,
                            float(spec.sesoi or sesoi), len(specs))  # fmt: skip
            rows.append({**row, "weights": _mean_weights(weights.get(spec.label(), []))})
        for est, arms in fits.items():
            true = truths if est == "primary" and predictive else truth(est, name, primary)
            summary = _summary(
                arms["null"], arms["planted"], sign, true,
                primary.equivalence_margin, sesoi,
            )  # fmt: skip
            rows.append({"estimand": est, "class": name, **summary,
                         "weights": _mean_weights(weights.get(est, []))})  # fmt: skip
    return rows


# ---------------------------------------------------------------- co-primaries (v4)

VERDICTS = ("supported", "no_practical_effect", "contradicted", "inconclusive", "not_evaluable")


def holm_readings(
    frame: pd.DataFrame, specs: list[PrimarySpec], alpha: float, n_boot: int, seed: int
) -> list[Reading]:
    """Every spec scored on one directions table by its own estimator
    (``primary.primary_result``) and read together by Holm's step-down, as ``identify pool``
    reads the pooled shards (``shards.score_primaries``)."""
    from experiments.identify.estimation.multiplicity import holm

    tables = StudyTables(frame)

    def score(spec: PrimarySpec, confidence: float) -> PrimaryResult:
        return primary_result(tables, spec, n_boot, seed, confidence)

    return holm(specs, score, alpha)


def spec_truth(spec: PrimarySpec, frame: pd.DataFrame, confound_name: str) -> float:
    """One primary's truth in one toy: what detection predicts there for a predictive one
    (over its own families), else :func:`truth`."""
    estimator = spec.estimator
    if estimator in PREDICTIVE:
        return practitioner_truth(frame, BUILT_FAMILIES[str(estimator)])
    return truth("primary", confound_name, spec)


def _shares(values: Sequence[str], keys: Sequence[str]) -> dict[str, float]:
    return {k: sum(v == k for v in values) / len(values) for k in keys} if values else {}


def _holm_row(
    spec: PrimarySpec, cls: str, arms: dict[str, list[Reading]],
    truths: dict[str, list[float]], planted_sign: int, sesoi: float, n_primaries: int,
) -> DesignRow:  # fmt: skip
    """One primary's row of the co-primary table (the module docstring): the interval and
    verdict each toy's Holm reading gave, summarised over the no-effect and planted toys."""
    hypothesis = 1 if spec.hypothesis == "positive" else -1
    fits = {arm: [_fit(r.result.slope) for r in arms[arm]] for arm in arms}
    summary = _summary(
        fits["null"], fits["planted"], hypothesis, truths["null"],
        spec.equivalence_margin, sesoi,
    )  # fmt: skip
    verdicts = {arm: _shares([r.verdict for r in arms[arm]], VERDICTS) for arm in arms}
    steps = {arm: [str(r.step) if r.step else "unsettled" for r in arms[arm]] for arm in arms}
    levels = [*(str(k) for k in range(1, n_primaries + 1)), "unsettled"]
    planted_truth = truths["planted"]
    return {
        "estimand": spec.label(), "class": cls, **summary,
        # the pre-registered readings (read_verdict at Holm's level), not the bare interval
        "supported_0": verdicts["null"].get("supported"),
        "no_practical_0": verdicts["null"].get("no_practical_effect"),
        "power": verdicts["planted"].get("supported"),
        "planted": float(np.mean(planted_truth)) if planted_truth else None,
        "planted_effect": planted_sign * sesoi,
        "truth_sd": float(np.std(truths["null"], ddof=1)) if len(truths["null"]) > 1 else None,
        "estimator": spec.estimator, "question": spec.estimand,
        "verdicts_null": verdicts["null"], "verdicts_planted": verdicts["planted"],
        "holm_step_null": _shares(steps["null"], levels),
        "holm_step_planted": _shares(steps["planted"], levels),
        "confidence_null": float(np.mean([r.confidence for r in arms["null"]])),
    }  # fmt: skip


def _mean_weights(weights: list[dict[str, float]]) -> dict[str, float]:
    mean_w = pd.DataFrame(weights).fillna(0.0).mean().round(4)
    return {str(k): float(v) for k, v in mean_w.items() if v > 0}


def co_primary_names(primary: PrimarySpec) -> list[str]:
    """The names the table's rows carry for each primary: ``primary`` for a single one
    (v3's tables), else each spec's ``name``."""
    from experiments.identify.heldout.prereg import primaries

    specs = primaries(primary)
    return [str(s.name) for s in specs] if len(specs) > 1 else ["primary"]


def check_design(table: Sequence[DesignRow], estimand: str = "primary",
                 bound: float = COVERAGE_BOUND) -> list[str]:  # fmt: skip
    """The gate: why a confirmatory grid is refused (empty: it passes). Its primary must
    cover its truth (0, or AUROC's effect through the dose for a primary that does not
    hold the dose fixed: :func:`truth`) in at least ``bound`` of the no-effect toys of
    every class."""
    rows = [r for r in table if r["estimand"] == estimand]
    if not rows:
        return [f"the table has no {estimand!r} rows"]
    failures = []
    for r in rows:
        cov = r.get("coverage", r.get("coverage_0"))
        if cov is None:
            failures.append(f"{r['class']}: the {estimand} was not evaluable on the toys")
        elif cov < bound:
            failures.append(
                f"{r['class']}: the {estimand}'s interval covers its truth "
                f"({r.get('truth', 0.0):+.2f}) in {cov:.0%} of {r['n_null']} no-effect toys "
                f"(< {bound:.0%}; Monte Carlo se {_mc_se(cov, r['n_null']):.2f}; "
                f"'supported' in {r['supported_0']:.0%})"
            )
    return failures


def primary_of(config: IdentifyStudyConfig) -> PrimarySpec:
    """The pre-registered primary the config names, or v2's default when none is readable."""
    from experiments.identify.heldout.prereg import PreregistrationError, load_preregistration

    path = config.identify.preregistration
    try:
        return load_preregistration(path).primary if path else DEFAULT_PRIMARY
    except (OSError, PreregistrationError):
        return DEFAULT_PRIMARY


def heldout_count(config: IdentifyStudyConfig) -> int:
    """How many concepts the confirmatory (held-out) run scores: the held-out set from
    ``identify.offset`` on (v4 takes v3's held-out set after its first 300), at most
    ``identify.limit`` of them, as ``study.with_concepts`` chooses them."""
    from experiments.concepts import load_concepts
    from experiments.identify.heldout.prereg import split_concepts

    ident = config.identify
    synsets = [c.synset for c in load_concepts(config.concepts.file).concepts]
    held = split_concepts(synsets, ident.heldout_fraction, ident.split_seed)[1][ident.offset :]
    return min(len(held), ident.limit) if ident.limit else len(held)


def measured_toy(
    ident: IdentifyConfig, measured: Components, seed: int = 0,
    population: str = "equal_geometry",
) -> dict[str, float]:  # fmt: skip
    """The toy's components from a run's (:mod:`variance`): the effect's within-cell sd,
    the concepts' slope spread, and the random draws' signal sd scaled so that a toy's
    AUROC spread inside equal-geometry cells matches the measured one (AUROC is nearly
    linear in the signal over that small range); with AUROC's measured reliability inside
    the cells, its measurement error and true spread each matched to it. Components
    measured on the practitioner's directions set the effect's noise and the slope spread
    only (their AUROC spread is the families' geometry, not the draws')."""
    toy = toy_overrides(measured)
    if getattr(ident, "isocos_draw", "graded") != "random" or population == "practitioner":
        return toy
    probe = toy_directions(ident, CLASSES["none"], seeded_rng(seed, "calibrate"), 0.0, 25)
    rel = measured.auroc_reliability
    if rel is None or not 0 < rel < 1:
        spread = auroc_within_sd(probe)
        if spread > 0:
            toy["random_signal_sd"] = TOY["random_signal_sd"] * measured.auroc_within_sd / spread
        return toy
    # a measured reliability splits the measured spread into true spread and error: the
    # error sd is set directly, the true spread by scaling what makes it (the draws'
    # signal and the direction-level spread) together
    toy["auroc_measurement_sd"] = float(np.sqrt(1 - rel) * measured.auroc_within_sd)
    true_spread = auroc_within_sd(probe.assign(auroc=probe["auroc_true"]))
    if true_spread > 0:
        k = float(np.sqrt(rel) * measured.auroc_within_sd / true_spread)
        toy["random_signal_sd"] = TOY["random_signal_sd"] * k
        toy["auroc_spread_sd"] = TOY["auroc_spread_sd"] * k
    return toy


def power_curve(
    ident: IdentifyConfig, primary: PrimarySpec, sizes: Sequence[int], *, toys: int,
    seed: int = 0, n_boot: int = 499, toy: dict[str, float] | None = None,
    progress: Callable[[str, int, int], None] | None = None, primary_only: bool = False,
    known: dict[int, Sequence[DesignRow]] | None = None,
) -> list[CurvePoint]:  # fmt: skip
    """The primary's operating characteristics by number of concepts, in the class where
    its truth is 0 with nothing planted (:func:`power_class`): power at the smallest
    effect of interest, its mean interval width, and how often 'no practical effect' is
    read when AUROC does nothing (the equivalence test's power). What a confirmatory
    run's size is chosen from. With co-primaries: one row per primary, class and number
    (``primary``, ``class``), each read by Holm beside the others, in its power class with
    the read-out and without (:func:`co_power_classes`). ``known``: a table already
    simulated at a number of concepts with the same settings (the toys are seeded alike,
    so its rows are the ones this would compute)."""
    from experiments.identify.heldout.prereg import primaries

    specs = primaries(primary)
    names = co_primary_names(primary)
    co = len(specs) > 1
    own = {
        n: co_power_classes(s) if co else [power_class(s)]
        for s, n in zip(specs, names, strict=True)
    }
    classes = list(dict.fromkeys(c for cs in own.values() for c in cs))
    out: list[CurvePoint] = []
    for n in sizes:
        done = (known or {}).get(n, [])
        have = {r["class"] for r in done}
        rows = list(done) + (simulate(
            ident, primary, toys=toys, seed=seed, n_boot=n_boot,
            sesoi=float(primary.sesoi or SESOI), n_concepts=n,
            classes=[c for c in classes if c not in have], progress=progress, toy=toy,
            primary_only=primary_only,
        ) if set(classes) - have else [])  # fmt: skip
        for name in names:
            for cls in own[name]:
                (row,) = [r for r in rows if r["estimand"] == name and r["class"] == cls]
                point: CurvePoint = {"n_concepts": n}
                if co:
                    point["primary"], point["class"] = name, cls
                point["power"], point["width"] = row.get("power"), row.get("width")
                point["coverage"] = row.get("coverage")
                point["no_practical_0"] = row.get("no_practical_0")
                point["n_null"], point["n_planted"] = row["n_null"], row["n_planted"]
                out.append(point)
    return out


def co_power_classes(spec: PrimarySpec) -> list[str]:
    """Where a co-primary's power is read: with the read-out first (the one its power is
    stated in), then the toy's own geometry, for comparison."""
    return list(dict.fromkeys((power_class(spec, readout=True), power_class(spec))))


EQUIVALENCE_POWER = 0.8  # v4's requirement on P2's "no practical effect" reading


def power_summary(
    table: Sequence[DesignRow], curve: Sequence[CurvePoint], primary: PrimarySpec,
    n_concepts: int,
) -> dict[str, dict[str, object]]:  # fmt: skip
    """Per co-primary, in each of its power classes (:func:`co_power_classes`, the first
    the one its power is stated in): its "supported" rate with the smallest effect of
    interest planted and its "no practical effect" rate with none, at the study's number
    of concepts, and the smallest number on the power curve where each reaches
    :data:`EQUIVALENCE_POWER` (None: none of them does)."""
    from experiments.identify.heldout.prereg import primaries

    def at(name: str, cls: str) -> dict[str, object]:
        found = (r for r in table if r["estimand"] == name and r["class"] == cls)
        row = next(found, DesignRow())
        points = sorted(
            (int(c["n_concepts"]), float(v or 0.0), k)
            for c in curve if c.get("primary") == name and c.get("class") == cls
            for k, v in (("power", c.get("power")), ("no_practical_0", c.get("no_practical_0")))
        )  # fmt: skip

        def first(key: str) -> int | None:
            return next((m for m, v, k in points if k == key and v >= EQUIVALENCE_POWER), None)

        return {
            "class": cls, "n_concepts": n_concepts,
            "supported_at_sesoi": row.get("power"),
            "no_practical_effect_at_0": row.get("no_practical_0"),
            "smallest_n_reaching": {
                "bound": EQUIVALENCE_POWER, "supported": first("power"),
                "no_practical_effect": first("no_practical_0"),
            },
        }  # fmt: skip

    out = {}
    for spec in primaries(primary):
        name = str(spec.name)
        stated, *others = co_power_classes(spec)
        out[name] = {**at(name, stated), "also": {c: at(name, c) for c in others}}
    return out


def run_design(
    config: IdentifyStudyConfig, *, toys: int, seed: int = 0, n_boot: int = 499,
    progress: Callable[[str, int, int], None] | None = None, measured: Components | None = None,
    sizes: Sequence[int] = (), primary_only: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """``identify simulate``: the table for the config's grid and pre-registered primary,
    with the gate's verdict and what the toys assumed (``measured``: a run's variance
    components in place of the assumed ones)."""
    from experiments.identify.heldout.prereg import study_hash

    primary = primary_of(config)
    n = heldout_count(config)
    sesoi = float(primary.sesoi or SESOI)
    population = population_of(primary)
    toy = measured_toy(config.identify, measured, seed, population) if measured else None
    table = simulate(config.identify, primary, toys=toys, seed=seed, n_boot=n_boot,
                     sesoi=sesoi, n_concepts=n, progress=progress, toy=toy,
                     primary_only=primary_only)  # fmt: skip
    curve = power_curve(
        config.identify, primary, sizes, toys=toys, seed=seed, n_boot=n_boot, toy=toy,
        primary_only=primary_only, known={n: table},
    )  # fmt: skip
    names = co_primary_names(primary)
    co = _co_primary_block(primary, table, curve, n) if len(names) > 1 else {}
    return {
        "config": config.name,
        "study_hash": study_hash(config),
        "power_curve": curve,
        "primary": primary.model_dump(exclude={"rule"}),
        "toys_per_class_and_arm": toys,
        "seed": seed,
        "n_boot": n_boot,
        "n_concepts": n,
        "directions_per_concept": len(grid_rows(config.identify)),
        "sesoi": sesoi,
        "toy": {**TOY, **(toy or {})},
        "measured": measured.to_dict() if measured else None,
        "measured_on": population if measured else None,
        "classes": {k: asdict(v) for k, v in CLASSES.items()},
        "readout": {**READOUT},  # the geometry-only class's read-out (simulate.V3_BUILT)
        "table": table,
        **co,
        "failures": design_failures(table, primary),
    }


def design_failures(table: Sequence[DesignRow], primary: PrimarySpec) -> list[str]:
    """The gate over every primary (:func:`check_design` for each of
    :func:`co_primary_names`): one that fails refuses the grid for them all."""
    return [f for name in co_primary_names(primary) for f in check_design(table, name)]


def _co_primary_block(
    primary: PrimarySpec, table: Sequence[DesignRow], curve: Sequence[CurvePoint],
    n: int,
) -> dict[str, Any]:  # fmt: skip
    """What a co-primary table adds: the primaries as read, Holm's alpha, the powers."""
    from experiments.identify.heldout.prereg import primaries

    return {
        "primaries": [
            {"name": s.name, "estimator": s.estimator, "estimand": s.estimand,
             "families": list(BUILT_FAMILIES.get(str(s.estimator), ())),
             "hypothesis": s.hypothesis, "sesoi": s.sesoi,
             "equivalence_margin": s.equivalence_margin}
            for s in primaries(primary)
        ],
        "multiplicity": primary.multiplicity,
        "alpha": primary.family_alpha,
        "power": power_summary(table, curve, primary, n),
    }  # fmt: skip


def write_design(result: dict[str, Any], folder: str | Path) -> tuple[str, str]:
    """``simulate-<hash>.json`` and ``.csv`` in ``folder`` (the hash: the study's, the
    number of toys and the seed); their paths."""
    from pathlib import Path

    key = f"{result['study_hash']}|{result['toys_per_class_and_arm']}|{result['seed']}"
    stem = Path(folder) / f"simulate-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = stem.with_suffix(".json"), stem.with_suffix(".csv")
    json_path.write_text(json.dumps(result, indent=1, default=float) + "\n", encoding="utf-8")
    flat = [
        {
            **{k: v for k, v in r.items() if not isinstance(v, dict)},
            **{f"weight:{m}": w for m, w in r["weights"].items()},
            **{f"{k}:{m}": w for k, v in r.items() if isinstance(v, dict) and k != "weights"
               for m, w in v.items()},
        }
        for r in result["table"]
    ]  # fmt: skip
    pd.DataFrame(flat).to_csv(csv_path, index=False)
    return str(json_path), str(csv_path)
