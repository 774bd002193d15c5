"""The stratified subset's analysis (identify v2, exploratory): the AUROC slope at each
fixed and at the KL-matched dose and on the generated outcome, and how well the two
outcomes agree (``identify/stages/matched.py`` and ``subset.py`` measure them)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from experiments.identify.estimation.analysis import GOOD_COS
from experiments.identify.estimation.estimator import SPLINE_DF, _BootSpline, flexible_slope, log_kl
from experiments.identify.measures import LIKELIHOOD, OUTCOMES, DirectionOutcome
from experiments.kernel.outcomes import Estimator
from experiments.record.identified import OutcomeSlopes, SubsetAgreement, SubsetResult


def subset_outcomes(
    frame: pd.DataFrame,
    subset: Sequence[str],
    *,
    n_boot: int = 1999,
    seed: int = 0,
    spline_df: int = SPLINE_DF,
) -> SubsetResult:
    """The stratified subset (exploratory): the flexible AUROC slope on the likelihood
    outcome at 1× β, at each fixed dose (``dose_effect_<k>x``) and at the KL-matched dose
    (``dose_effect_matched``); and each declared outcome's slopes (``measures.py``,
    :func:`outcome_slopes`: the generated outcome, Δ gated, also beside log KL and with
    its agreement with the likelihood over good directions too, where agreement is not
    carried by the contrast between v* and far rotations; the name-free outcome)."""
    part = frame[frame["concept"].isin(list(subset))].copy()
    if part.empty:
        return SubsetResult(evaluable=False, reason="no subset")
    if "kl" in part:
        part = part.assign(log_kl=log_kl(part["kl"]))
    kw = _BootSpline(n_boot=n_boot, seed=seed, spline_df=spline_df)
    doses = [str(c) for c in part.columns if str(c).startswith("dose_effect_")]
    out = SubsetResult(
        concepts=sorted(subset),
        likelihood_1x=flexible_slope(part, LIKELIHOOD.column, "auroc", **kw),
        dose={
            c.removeprefix("dose_effect_"): flexible_slope(part, c, "auroc", **kw) for c in doses
        },
    )
    if "dose_matched" in part:
        ok = part["dose_matched"].astype(bool)
        out.matched_share = float(ok.mean())  # on the prompts the dose was bisected on
        if "dose_kl_kind" in part:  # the KL matched on (identify.dose_kl); v2: "all"
            out.matched_on = str(part["dose_kl_kind"].dropna().iloc[0])
        if "dose_matched_verify" in part and part["dose_matched_verify"].notna().any():
            # on held-apart prompts, against v*'s KL there (identify.dose_verify)
            held = part["dose_matched_verify"].dropna().astype(bool)
            out.matched_share_verify = float(held.mean())
            out.verify_gap_median = float(part["dose_verify_gap"].median())
        out.matched_multiplier = {
            str(m): float(g["dose_multiplier"].median())
            for m, g in part.groupby("manipulation", sort=True)
        }
    for key, measure in OUTCOMES.items():  # every declared slope the subset measured
        y = measure.column
        if Estimator.SLOPE in measure.estimators and y in part and part[y].notna().any():
            fits = outcome_slopes(part, measure, kw, n_boot=n_boot, seed=seed)
            if fits is not None:
                out.outcomes[key] = fits
    return out


def outcome_slopes(
    part: pd.DataFrame, measure: DirectionOutcome, kw: _BootSpline, *, n_boot: int, seed: int
) -> OutcomeSlopes | None:
    """One declared outcome on the subset (``measures.py``): its flexible slope on each of
    its detection columns, beside log KL when it says so, and its within-concept r with
    the outcome it should agree with, over every direction and over good ones; None when
    a detection column is missing (no concept with name-free positives: no column)."""
    from experiments.identify.estimation.stats import within_correlation

    if any(d not in part for d in measure.detectors):
        return None
    y = measure.column
    out = OutcomeSlopes(slopes={d: flexible_slope(part, y, d, **kw) for d in measure.detectors})
    if Estimator.GIVEN_DOSE in measure.estimators and "log_kl" in part:
        out.given_dose = flexible_slope(part, y, measure.detectors[0], covariates=["log_kl"], **kw)
    if Estimator.AGREEMENT in measure.estimators and measure.agrees_with is not None:
        both = part.dropna(subset=[y, measure.agrees_with])
        good = both[both["cos_ref"] >= GOOD_COS]
        out.agreement = SubsetAgreement(
            all=within_correlation(both, y, measure.agrees_with, n_boot=n_boot, seed=seed),
            good=within_correlation(good, y, measure.agrees_with, n_boot=n_boot, seed=seed),
            good_n=len(good),
        )
    return out
