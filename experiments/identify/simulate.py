"""Toy studies with a known answer, to hold the identify estimators to it (issue 36).

A toy has the study's shape (25 concepts; per concept v*, the three rotation families at
22.5°…90°, label noise 4 levels × 2 seeds, the logistic C path, the shrinkage path, three
training sizes) and the study's geometry: each manipulation moves cos(v, v*) its own way
and AUROC is a manipulation-specific function of cos plus direction-level variation
(what the test split's 40 texts can tell apart) and measurement noise.

The effect is a function of geometry only (``shape``: ``linear``, ``convex`` cos²,
``concave`` √cos, or ``nuisance``: linear plus the nuisance family's own push), plus
``planted``·(true AUROC). With ``planted = 0`` detection does nothing, so a correct
estimator's 95% interval covers 0 in about 95% of toys whatever the shape; the v1
estimator (one straight line in cos, concept fixed effects) does not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SHAPES = ("linear", "convex", "concave", "nuisance")

# family -> the AUROC it gives at cos c (before direction-level variation): rotation
# families fall with the angle, each at its own rate; the estimator paths move AUROC and
# cos apart (shrinkage: AUROC rises as the direction whitens away from v*).
_ROTATION_POWER = {"rotation:isotropic": 1.0, "rotation:pc": 2.0, "rotation:other": 0.6}
_PUSH = {"rotation:isotropic": 0.0, "rotation:pc": 0.25, "rotation:other": 0.4}


def _directions(rng: np.random.Generator) -> list[tuple[str, float, float]]:
    """(manipulation, cos, true AUROC before concept and direction variation)."""
    out = [("reference", 1.0, 0.93)]
    for fam, power in _ROTATION_POWER.items():
        for theta in (22.5, 45.0, 67.5, 90.0):
            c = float(np.cos(np.deg2rad(theta)))
            out.append((fam, c, 0.5 + 0.43 * max(c, 0.0) ** power))
    for rho in (0.1, 0.2, 0.3, 0.4):
        for _ in range(2):
            c = 1 - 0.6 * rho - 0.05 * abs(rng.standard_normal())
            out.append(("noise", c, 0.93 - 0.9 * rho))
    for k in range(4):
        out.append(("logistic", 0.45 + 0.1 * k + 0.03 * rng.standard_normal(), 0.95 - 0.01 * k))
    for k in range(4):  # λ = 0.3, 0.1, 0.03, 0.01
        out.append(("shrinkage", 0.85 - 0.15 * k, 0.94 + 0.015 * k))
    for k in range(3):  # 3, 6, 15 texts
        out.append(("size", 0.55 + 0.12 * k + 0.03 * rng.standard_normal(), 0.7 + 0.08 * k))
    return out


def _geometry(shape: str, cos: np.ndarray, family: np.ndarray) -> np.ndarray:
    c = np.clip(cos, 0.0, 1.0)
    if shape == "linear":
        return c
    if shape == "convex":
        return c**2
    if shape == "concave":
        return np.sqrt(c)
    if shape == "nuisance":
        push = np.array([_PUSH.get(f, 0.0) for f in family])
        return c + push * np.sqrt(1 - c**2)
    raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")


def toy_study(
    seed: int,
    shape: str = "concave",
    planted: float = 0.0,
    n_concepts: int = 25,
    auroc_sd: float = 0.04,
    measurement_sd: float = 0.025,
    effect_sd: float = 0.03,
) -> pd.DataFrame:
    """One toy: a ``directions`` table with the columns the analysis reads (concept,
    manipulation, cos_ref, auroc, effect) and the true AUROC (``auroc_true``)."""
    rng = np.random.default_rng(seed)
    fams, cos, base, concept, scale = [], [], [], [], []
    for i in range(n_concepts):
        table = _directions(rng)
        fams += [t[0] for t in table]
        cos += [t[1] for t in table]
        base += [t[2] for t in table]
        concept += [f"c{i:02d}"] * len(table)
        scale.append(np.full(len(table), 1 + 0.3 * rng.standard_normal()))
    n = len(fams)
    family = np.array(fams)
    idx = np.unique(concept, return_inverse=True)[1]
    detect = 0.03 * rng.standard_normal(n_concepts)[idx]  # concepts differ in detection
    spread = np.where(family == "reference", 0.0, auroc_sd * rng.standard_normal(n))
    true = np.clip(np.array(base) + detect + spread, 0.4, 1.0)
    frame = pd.DataFrame(
        {
            "concept": concept,
            "manipulation": family,
            "cos_ref": np.array(cos),
            "auroc_true": true,
            "auroc": np.clip(true + measurement_sd * rng.standard_normal(n), 0.0, 1.0),
            "scale": np.concatenate(scale),  # concepts steer more or less easily
        }
    )
    geometry = _geometry(shape, frame["cos_ref"].to_numpy(), frame["manipulation"].to_numpy())
    noise = effect_sd * rng.standard_normal(len(frame))
    frame["effect"] = frame["scale"] * geometry + planted * frame["auroc_true"] + noise
    return frame.drop(columns="scale")
