"""The stratified subset's analysis (identify v2, exploratory): the AUROC slope at each
fixed and at the KL-matched dose and on the generated outcome, and how well the two
outcomes agree (``identify/matched.py`` and ``subset.py`` measure them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from experiments.identify.analysis import GOOD_COS
from experiments.identify.estimator import SPLINE_DF, _BootSpline, flexible_slope, log_kl


def subset_outcomes(
    frame: pd.DataFrame,
    subset: Sequence[str],
    *,
    n_boot: int = 1999,
    seed: int = 0,
    spline_df: int = SPLINE_DF,
) -> dict[str, Any]:
    """The stratified subset (exploratory): the flexible AUROC slope on the likelihood
    outcome at 1× β, at each fixed dose (``dose_effect_<k>x``), at the KL-matched dose
    (``dose_effect_matched``) and on the generated outcome (``gen_effect``, Δ gated), the
    last also beside log KL; and how well the two outcomes agree within concepts, over
    every direction and over good ones only (cos ≥ :data:`GOOD_COS`), where agreement
    is not carried by the contrast between v* and far rotations."""
    from experiments.identify.stats import within_correlation

    part = frame[frame["concept"].isin(list(subset))].copy()
    if part.empty:
        return {"evaluable": False, "reason": "no subset"}
    if "kl" in part:
        part = part.assign(log_kl=log_kl(part["kl"]))
    kw = _BootSpline(n_boot=n_boot, seed=seed, spline_df=spline_df)
    doses = [c for c in part.columns if c.startswith("dose_effect_")]
    out: dict[str, Any] = {
        "concepts": sorted(subset),
        "likelihood_1x": flexible_slope(part, "effect", "auroc", **kw).to_dict(),
        "dose": {
            c.removeprefix("dose_effect_"): flexible_slope(part, c, "auroc", **kw).to_dict()
            for c in doses
        },
    }
    if "dose_matched" in part:
        ok = part["dose_matched"].astype(bool)
        out["matched_share"] = float(ok.mean())  # on the prompts the dose was bisected on
        if "dose_kl_kind" in part:  # the KL matched on (identify.dose_kl); v2: "all"
            out["matched_on"] = str(part["dose_kl_kind"].dropna().iloc[0])
        if "dose_matched_verify" in part and part["dose_matched_verify"].notna().any():
            # on held-apart prompts, against v*'s KL there (identify.dose_verify)
            held = part["dose_matched_verify"].dropna().astype(bool)
            out["matched_share_verify"] = float(held.mean())
            out["verify_gap_median"] = float(part["dose_verify_gap"].median())
        out["matched_multiplier"] = {
            m: float(g["dose_multiplier"].median())
            for m, g in part.groupby("manipulation", sort=True)
        }
    if (
        "effect_name_free" in part
        and part["effect_name_free"].notna().any()
        and "auroc_name_free" in part  # no concept with name-free positives: no column
    ):
        out["name_free"] = {  # the outcome without the name; detection with and without
            "auroc": flexible_slope(part, "effect_name_free", "auroc", **kw).to_dict(),
            "auroc_name_free": flexible_slope(
                part, "effect_name_free", "auroc_name_free", **kw
            ).to_dict(),
        }
    if "gen_effect" in part and part["gen_effect"].notna().any():
        out["generated"] = flexible_slope(part, "gen_effect", "auroc", **kw).to_dict()
        if "log_kl" in part:
            out["generated_given_dose"] = flexible_slope(
                part, "gen_effect", "auroc", covariates=["log_kl"], **kw
            ).to_dict()
        both = part.dropna(subset=["gen_effect", "effect"])
        good = both[both["cos_ref"] >= GOOD_COS]
        corr = {"n_boot": n_boot, "seed": seed}
        out["agreement"] = {
            "all": within_correlation(both, "gen_effect", "effect", **corr).to_dict(),
            "good": within_correlation(good, "gen_effect", "effect", **corr).to_dict(),
            "good_n": len(good),
        }
    return out
