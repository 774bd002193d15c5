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

**On the configured grid** (:func:`toy_directions`, read by ``design.py`` for
``steer-eval identify simulate``): every direction the config's grid makes (the
``@manipulation`` registry, iso-cos graded nuisances included; the null left out), per
concept a separability d′ (v*'s AUROC ≈ 0.93 on average) and a steerability (the
effect's scale). A direction v = c·v* + s·u (s = √(1−c²)) mixes v* with its family's
nuisance u (:class:`Nuisance`), which carries ``signal``·d′ of the class difference and
has ``variance`` relative to v*'s: its AUROC is Φ(d′_v/√2),
d′_v = d′·(c + s·signal)/√(c² + s²·variance), plus a direction-level spread (what the
test split can tell apart) and measurement noise. So AUROC differs between families and,
at one iso-cos angle, between nuisances, as in the study. The dose (log next-token KL)
rises with cos and with the direction's true AUROC (what makes a direction detect better
also moves the next token more). The effect is steerability·g(cos) + noise
(+ ``planted``·true AUROC). :data:`CLASSES` are the confounds, each with no AUROC effect:
the effect curved in cos; the dose driving the effect (AUROC nothing beside it),
measured with error (reliability 0.74, 0.41: of its within-(concept, manipulation)
variance) and used as a covariate; cos to the true concept direction measured with error
(a noisy reference, sd 0.05); steerability correlated with separability across concepts
(r = 0.7); each nuisance type its own push on the effect (independent of its AUROC, and
aligned with it, r = 0.7); AUROC measured with more error; ``flat``, the effect the
same for every direction of a concept, where an estimand that does not hold geometry
fixed (the practitioner's) has truth 0 and its power is read; and ``geometry_only``
(identify v4), where steering follows each direction's alignment with the concept and
nothing else, and the built directions' AUROC is a family-dependent read-out of that
alignment (:data:`V3_BUILT`, :func:`_readout`): a predictive estimand's truth there is
what detection predicts through geometry, not 0; and ``flat_readout``, ``flat`` with that
read-out, where AUROC spreads among the built directions as much as in v3.
The variance components (:data:`TOY`) are assumptions of the study's order of magnitude,
not estimates from the v2 runs.

Longer than 500 lines: the toys and their confound classes are one model of the study,
each class a variation of the same geometry, kept together so a reader sees every
assumption at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import pandas as pd

from experiments.identify.stages.directions import REFERENCE
from experiments.identify.stages.manipulations import direction_grid, is_control

if TYPE_CHECKING:
    from experiments.config import IdentifyConfig
    from experiments.identify.stages.directions import DirectionSpec

SHAPES = ("linear", "convex", "concave", "nuisance")  # toy_study's; toy_directions adds "flat"

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
    c: np.ndarray = np.clip(cos, 0.0, 1.0)
    if shape == "linear":
        return c
    if shape == "convex":
        return c**2
    if shape == "concave":
        return cast(np.ndarray, np.sqrt(c))
    if shape == "nuisance":
        push = np.array([_PUSH.get(f, 0.0) for f in family])
        return cast(np.ndarray, c + push * np.sqrt(1 - c**2))
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


# ------------------------------------------------- the configured grid (identify simulate)


@dataclass(frozen=True)
class Nuisance:
    """A nuisance u ⟂ v*: the share of v*'s separability it carries, its variance."""

    signal: float
    variance: float


# Every family of the registry needs its toy geometry here (a new one: add it).
ROTATION = {
    "isotropic": Nuisance(0.0, 0.5),
    "pc": Nuisance(0.0, 4.0),  # high-variance axes: AUROC falls fastest
    "other": Nuisance(0.15, 1.5),
}
FAMILY = {  # the estimator paths move cos and AUROC apart
    "noise": Nuisance(0.0, 2.0),
    "logistic": Nuisance(0.7, 0.6),
    "shrinkage": Nuisance(0.9, 0.4),  # whitening: AUROC rises as cos falls
    "size": Nuisance(0.0, 1.0),
}


# Random iso-cos draws (v3): each band of the spectrum its own variance relative to v*'s
# (the top axes most), and each draw's random signs its own share of the class
# difference, N(0, random_signal_sd): what moves AUROC within a (concept, angle, band) cell.
BAND_VARIANCE = (4.0, 1.5, 0.7, 0.3)


def band_nuisance(band: int, signal: float) -> Nuisance:
    """A random draw's nuisance: its band's variance (bands past the table: the last)."""
    return Nuisance(signal, BAND_VARIANCE[min(band, len(BAND_VARIANCE) - 1)])


def graded(k: int) -> Nuisance:
    """The k-th iso-cos nuisance: 0 the discriminative residual (raises AUROC), k ≥ 1 the
    covariance eigenvector at rank 2^(k−1) (lowers AUROC, most at rank 1)."""
    return Nuisance(0.6, 0.5) if k == 0 else Nuisance(0.0, 6.0 / (2 ** (k - 1)) ** 0.6)


# Assumed variance components (nats/token, AUROC units): the study's order of magnitude
# (effect reliability ≈ 0.9, detection reliabilities 0.82–0.86, v* AUROC ≈ 0.93), not
# estimates from the v2 runs.
TOY = {
    "separability_mean": 2.1,  # v*'s d′ (AUROC Φ(2.1/√2) ≈ 0.93)
    "separability_sd": 0.35,
    "steerability_sd": 0.3,  # the effect's scale per concept, mean 1
    "auroc_spread_sd": 0.03,  # direction-level true AUROC beyond geometry
    "auroc_measurement_sd": 0.025,
    # calibrated so the v2 primary's interval is about as wide as on the v2 held-out run
    # (0.96 nats/AUROC): a direction's effect beyond its geometry, and each concept's own
    # AUROC slope around the planted one (a random slope, mean 0 when nothing is planted)
    "effect_sd": 0.25,
    "slope_sd": 1.2,
    # log KL = −3 + cos + dose_auroc·(true AUROC − 0.8) + noise: a direction that detects
    # better moves the next token more at the same β (as in the v2 development run)
    "dose_auroc": 2.0,
    "dose_noise_sd": 0.3,
    "dose_effect": 0.25,  # class dose: nats per unit log KL, ≈ +0.5 per AUROC if ignored
    "push_sd": 0.1,  # class nuisance push: nats at sin θ = 1
    # a random draw's share of the class difference (v3): sets the AUROC spread within a
    # (concept, angle, band) cell, about 0.02-0.04 AUROC at 45°; an assumption to be
    # checked against the development run's within-cell AUROC spread
    "random_signal_sd": 0.1,
}


# v3's built directions as measured (the 300 pooled held-out concepts, the committed
# shards' directions.csv): per family and level (logistic: log10 C; shrinkage: λ; size:
# training texts), the mean AUROC and the mean likelihood effect (nats/token). The
# geometry-only class explains both by alignment alone: a type's mean alignment is its
# effect ÷ READOUT's gain, and its AUROC offset is what reads v3's mean AUROC out of it.
# So the whitened path detects at 0.99 and steers like v* with no AUROC effect at all.
V3_BUILT: dict[str, dict[float, tuple[float, float]]] = {
    "reference": {0.0: (0.7459, 1.0551)},
    "logistic": {-3.0: (0.7781, 1.1739), -2.0: (0.7809, 1.1778), -1.0: (0.8024, 1.2050),
                 0.0: (0.8920, 1.2537)},
    "shrinkage": {0.01: (0.9770, 0.8614), 0.03: (0.9875, 0.9884), 0.1: (0.9926, 1.1162),
                  0.3: (0.9935, 1.1982)},
    "size": {3.0: (0.6611, 0.7544), 6.0: (0.7054, 0.8855), 15.0: (0.7550, 1.0697)},
}  # fmt: skip
# The read-out around those means (assumed: the alignment's direction-level spread, the
# probit AUROC per unit alignment, the concepts' separability in probit units), chosen
# among a few so that the toy looks like v3 inside a type: its within-(concept, type)
# slope of the effect on AUROC +0.68 (v3 +0.79), AUROC's sd there 0.06-0.08 (v3
# 0.05-0.09); the practitioner's truths then +0.45 over all four families and -0.11 over
# the full-data ones (v3's estimates +0.47, -0.14).
READOUT = {
    "alignment_gain": 1.3,  # nats/token at alignment 1 for a concept of mean steerability
    "alignment_sd": 0.07,
    "probit_per_alignment": 3.0,
    "separability_probit_sd": 0.3,
}


@dataclass(frozen=True)
class Confound:
    description: str
    dose_reliability: float | None = None  # the dose drives the effect, measured so
    # linear, convex, concave (in the true cos), flat, or alignment (needs readout)
    shape: str = "linear"
    # the built directions' AUROC read out of their alignment with v3's family offsets
    # (_readout), in place of the toy's nuisance geometry
    readout: bool = False
    cos_sd: float = 0.0  # cos to the true concept direction, beyond cos(v, v*)
    steer_separability_r: float = 0.0
    push_sd: float = 0.0
    push_auroc_r: float = 0.0  # a nuisance's push aligned with its typical AUROC
    auroc_measurement_sd: float | None = None

    def __post_init__(self) -> None:
        if self.shape == "alignment" and not self.readout:
            raise ValueError("shape 'alignment' steers by the read-out's alignment: readout=True")

    def mediated(self) -> float:
        """AUROC's effect through the dose when the dose drives the effect (the toy makes
        the dose rise with the direction's AUROC): what an estimand that does not hold
        the dose fixed should find with nothing planted (0 for one that does)."""
        return TOY["dose_effect"] * TOY["dose_auroc"] if self.dose_reliability else 0.0


CLASSES: dict[str, Confound] = {
    "none": Confound("no confound: the effect linear in cos"),
    # nothing about a direction steers beyond noise: every estimand's truth 0, also the
    # practitioner's (which does not hold geometry fixed); where its power is read
    "flat": Confound("the effect the same for every direction of a concept", shape="flat"),
    "convex": Confound("the effect convex in cos (cos²)", shape="convex"),
    "concave": Confound("the effect concave in cos (√cos)", shape="concave"),
    "dose_rel_0.74": Confound("the dose drives the effect; log KL reliability 0.74", 0.74),
    "dose_rel_0.41": Confound("the dose drives the effect; log KL reliability 0.41", 0.41),
    "cos_error": Confound("true cos = cos(v, v*) + N(0, 0.05): a noisy reference", cos_sd=0.05),
    "steer_sep_r0.7": Confound(
        "steerability correlated with separability, r = 0.7", steer_separability_r=0.7
    ),
    "push": Confound("each nuisance type its own push, independent of its AUROC", push_sd=0.1),
    "push_aligned": Confound(
        "each nuisance type its own push, r = 0.7 with its AUROC", push_sd=0.1, push_auroc_r=0.7
    ),
    "auroc_error": Confound("AUROC measured with sd 0.06 (not 0.025)", auroc_measurement_sd=0.06),
    # identify v4: steering follows geometry only, and the built directions' AUROC reads
    # their alignment out with v3's family offsets (whitening detects far better at the
    # same alignment); a predictive primary's truth is what that read-out predicts
    "geometry_only": Confound(
        "steering follows the direction's alignment only; AUROC a family-dependent "
        "read-out of it (v3's family means) plus error",
        shape="alignment",
        readout=True,
    ),
    # flat with the built directions' AUROC as v3 spread it (the read-out): a predictive
    # primary's truth 0 with AUROC as spread among the built directions as v3 measured
    # (flat's toy geometry spreads the full-data directions' AUROC a third as much);
    # where v4's co-primaries' power is read
    "flat_readout": Confound(
        "the effect the same for every direction of a concept; AUROC read out as in geometry_only",
        shape="flat",
        readout=True,
    ),
}


def _nuisance(manipulation: str, seed: int | None) -> Nuisance:
    if manipulation.startswith("rotation:"):
        return ROTATION[manipulation.split(":", 1)[1]]
    if manipulation == "isocos":
        return graded(int(seed or 0))
    if manipulation in FAMILY:
        return FAMILY[manipulation]
    raise ValueError(f"no toy geometry for manipulation {manipulation!r}: add it to design.py")


def _cos(
    spec: DirectionSpec, levels: dict[str, list[float]], draw: np.ndarray
) -> float | np.ndarray:
    """A direction's toy cos(v, v*), per concept for a family of :data:`_COS_DRAW` (its
    column of the toy's draws, ``draw``)."""
    m, level = spec.manipulation, spec.level
    if m == REFERENCE:
        return 1.0
    if m.startswith("rotation:") or m == "isocos":
        return float(np.cos(np.deg2rad(level)))  # exact, as rotate() makes it
    if m == "noise":
        return cast(np.ndarray, 1 - 0.6 * level - 0.05 * np.abs(draw))
    if m == "logistic":  # weaker regularisation: closer to v*
        rank = sorted(levels[m]).index(level) / max(len(levels[m]) - 1, 1)
        return 0.45 + 0.3 * rank + 0.03 * draw
    if m == "shrinkage":
        return float(np.clip(1 + 0.3 * np.log10(level), 0.1, 1.0))
    if m == "size":  # the diffmean's estimation noise: cos ≈ 1/√(1 + k/n)
        return cast(np.ndarray, np.clip(1 / np.sqrt(1 + 6 / level) + 0.03 * draw, 0, 1))
    raise ValueError(f"no toy geometry for manipulation {m!r}: add it to design.py")


def _random(ident: IdentifyConfig) -> bool:
    return getattr(ident, "isocos_draw", "graded") == "random"


def _key(manipulation: str, seed: int | None, ident: IdentifyConfig) -> tuple[str, int | None]:
    """A direction's nuisance type: its family, the graded nuisance's rank, or the random
    draw's band (v3: the push of a type is shared by the concepts' draws in that band)."""
    if manipulation != "isocos":
        return (manipulation, None)
    if _random(ident):
        return ("isocos", int(seed or 0) % ident.isocos_bands)
    return ("isocos", seed)


def grid_rows(ident: IdentifyConfig) -> list[DirectionSpec]:
    """The configured grid, controls (the null) left out: they are not pooled."""
    return [s for s in direction_grid(ident) if not is_control(s.manipulation)]


def _types(specs: list[DirectionSpec], ident: IdentifyConfig) -> list[tuple[str, int | None]]:
    """The nuisance types a push is drawn for: each rotation family, each graded nuisance
    (each random draw's band), each other family."""
    keys = (_key(s.manipulation, s.seed, ident) for s in specs if s.manipulation != REFERENCE)
    return list(dict.fromkeys(keys))


def _type_nuisance(key: tuple[str, int | None], ident: IdentifyConfig) -> Nuisance:
    """The typical nuisance of a type (a random band's: no signal of its own)."""
    if key[0] == "isocos" and _random(ident):
        return band_nuisance(int(key[1] or 0), 0.0)
    return _nuisance(*key)


def _auroc(
    dprime: float | np.ndarray, c: float | np.ndarray, nuisance: Nuisance,
    c2: float | np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """``c2``: c² as :func:`_square` computes it (the vectorised toy: s² then too)."""
    from scipy.stats import norm

    c2 = c**2 if c2 is None else c2
    s = np.sqrt(np.clip(1 - c2, 0, None))
    s2 = s**2 if np.ndim(s) == 0 else _square(s)
    d = dprime * (c + s * nuisance.signal) / np.sqrt(c2 + s2 * nuisance.variance)
    return cast(np.ndarray, norm.cdf(d / np.sqrt(2)))


def _square(x: np.ndarray) -> np.ndarray:
    """x² element by element as Python's float ``**`` computes it (libm's pow): numpy's
    square differs from it in the last bit of a few values in a thousand, and the toys
    stay as they were when drawn row by row."""
    return np.array([v**2 for v in x.ravel().tolist()]).reshape(x.shape)


_COS_DRAW = ("noise", "logistic", "size")  # families whose toy cos takes a draw


def _rows(
    ident: IdentifyConfig, specs: list[DirectionSpec], levels: dict[str, list[float]],
    push: dict[tuple[str, int | None], float], confound: Confound, t: dict[str, float],
    z_sep: np.ndarray, z_steer: np.ndarray, slopes: np.ndarray, rng: np.random.Generator,
) -> pd.DataFrame:  # fmt: skip
    """Every (concept, direction) row of a toy, vectorised over concepts (written out row
    by row a 297-concept toy took 14 s). The draws are taken in one block laid out as the
    row-by-row loop took them, concept by concept and spec by spec: [cos draw of a noisy
    family] true-cos draw, [a random draw's signal, the first time its draw appears]
    [direction-level AUROC, not for v*] dose draw (numpy's bulk draws equal the same
    number of single draws), so a seed gives the toy it always gave."""
    n = len(z_sep)
    slots: dict[str, list[int]] = {k: [] for k in ("cos", "true", "signal", "q", "dose")}
    first: dict[int, int] = {}  # a random draw's seed -> its signal's slot
    width = 0
    for spec in specs:
        random_iso = spec.manipulation == "isocos" and _random(ident)
        slots["cos"].append(width if spec.manipulation in _COS_DRAW else -1)
        width += spec.manipulation in _COS_DRAW
        slots["true"].append(width)
        width += 1
        k = int(spec.seed or 0)
        if random_iso and k not in first:
            first[k] = width
            width += 1
        slots["signal"].append(first[k] if random_iso else -1)
        slots["q"].append(-1 if spec.manipulation == REFERENCE else width)
        width += spec.manipulation != REFERENCE
        slots["dose"].append(width)
        width += 1
    z = rng.standard_normal(n * width).reshape(n, width)

    def drawn(name: str) -> np.ndarray:  # [concepts, specs]; 0 where the spec takes none
        at = np.array(slots[name])
        return np.where(at >= 0, z[:, np.maximum(at, 0)], 0.0)

    cos = np.empty((n, len(specs)))
    cos_draw = drawn("cos")
    signal = np.zeros((n, len(specs)))
    variance = np.ones((n, len(specs)))
    bands: list[float] = []
    keys = []
    for j, spec in enumerate(specs):
        m = spec.manipulation
        cos[:, j] = _cos(spec, levels, cos_draw[:, j])
        key = _key(m, spec.seed, ident)
        keys.append(key)
        band = np.nan
        if m == "isocos" and _random(ident):
            band = int(key[1] or 0)
            signal[:, j] = t["random_signal_sd"] * z[:, slots["signal"][j]]
            variance[:, j] = band_nuisance(band, 0.0).variance
        elif m != REFERENCE:
            nuisance = _nuisance(*key)
            signal[:, j], variance[:, j] = nuisance.signal, nuisance.variance
        bands.append(band)
    true_c = np.clip(cos + confound.cos_sd * drawn("true"), -1, 1)
    dprime = (t["separability_mean"] + t["separability_sd"] * z_sep)[:, None]
    true_c2 = _square(true_c)
    auroc = _auroc(dprime, true_c, Nuisance(signal, variance), true_c2)  # type: ignore[arg-type]
    auroc = np.clip(auroc + t["auroc_spread_sd"] * drawn("q"), 0.3, 1.0)
    dose = -3 + true_c + t["dose_auroc"] * (auroc - 0.8) + t["dose_noise_sd"] * drawn("dose")
    sin2 = 1 - true_c2
    pushes = np.array([push.get(k, 0.0) for k in keys])
    return pd.DataFrame({
        "concept": np.repeat([f"c{i:02d}" for i in range(n)], len(specs)),
        "direction": [s.id for s in specs] * n,
        "manipulation": [s.manipulation for s in specs] * n,
        "level": [s.level for s in specs] * n,
        "seed": [s.seed if s.seed is not None else np.nan for s in specs] * n,
        "cos_ref": cos.ravel(), "true_cos": true_c.ravel(), "auroc_true": auroc.ravel(),
        "log_kl_true": dose.ravel(),
        "steer": np.repeat(1 + t["steerability_sd"] * z_steer, len(specs)),
        "slope": np.repeat(slopes, len(specs)),
        "push": (pushes[None, :] * np.sqrt(np.maximum(sin2, 0.0))).ravel(),
        "nuisance_band": bands * n,
    })  # fmt: skip


def toy_directions(
    ident: IdentifyConfig, confound: Confound, rng: np.random.Generator, planted: float = 0.0,
    n_concepts: int = 25, toy: dict[str, float] | None = None,
) -> pd.DataFrame:  # fmt: skip
    """One toy study on the configured grid: the ``directions`` columns the analysis reads
    (concept, direction, manipulation, level, seed, cos_ref, auroc, kl, effect) and the
    truth (auroc_true, log_kl_true). ``toy``: components in place of :data:`TOY`'s."""
    t = {**TOY, **(toy or {})}
    specs = grid_rows(ident)
    levels: dict[str, list[float]] = {}
    for s in specs:
        levels.setdefault(s.manipulation, []).append(s.level)
    types = _types(specs, ident)
    typical = np.array(
        [_auroc(t["separability_mean"], np.cos(np.pi / 4), _type_nuisance(k, ident))
         for k in types]
    )  # fmt: skip
    z_type = (typical - typical.mean()) / (typical.std() or 1.0)
    r = confound.push_auroc_r
    draw = rng.standard_normal(len(types))
    push = dict(zip(types, confound.push_sd * (r * z_type + np.sqrt(1 - r**2) * draw), strict=True))
    z_sep = rng.standard_normal(n_concepts)
    rs = confound.steer_separability_r
    z_steer = rs * z_sep + np.sqrt(1 - rs**2) * rng.standard_normal(n_concepts)
    slopes = planted + t["slope_sd"] * rng.standard_normal(n_concepts)
    f = _rows(ident, specs, levels, push, confound, t, z_sep, z_steer, slopes, rng)
    if confound.readout:
        _readout(f, z_sep, t["auroc_spread_sd"], rng)
    sd = confound.auroc_measurement_sd or t["auroc_measurement_sd"]
    f["auroc"] = np.clip(f["auroc_true"] + sd * rng.standard_normal(len(f)), 0.0, 1.0)
    measured = f["log_kl_true"].to_numpy()
    if confound.dose_reliability is not None:
        within = f["log_kl_true"] - f.groupby(["concept", "manipulation"])["log_kl_true"].transform(
            "mean"
        )
        error_var = within.var() * (1 - confound.dose_reliability) / confound.dose_reliability
        measured = measured + np.sqrt(error_var) * rng.standard_normal(len(f))
    f["kl"] = np.exp(measured)
    geometry = (
        READOUT["alignment_gain"] * f["alignment"] if confound.shape == "alignment" else
        {"linear": f["true_cos"], "convex": f["true_cos"].clip(0) ** 2,
         "concave": np.sqrt(f["true_cos"].clip(0)),
         "flat": pd.Series(1.0, index=f.index)}[confound.shape]
    )  # fmt: skip
    dose_term = TOY["dose_effect"] * (f["log_kl_true"] + 3) if confound.dose_reliability else 0.0
    noise = t["effect_sd"] * rng.standard_normal(len(f))
    # the effect's mean given the direction (concepts' slopes at their mean, no noise):
    # what a predictive estimand's truth is computed from (variance.practitioner_truth)
    f["effect_mean"] = f["steer"] * geometry + f["push"] + dose_term + planted * f["auroc_true"]
    f["effect"] = (
        f["steer"] * geometry + f["push"] + dose_term + f["slope"] * f["auroc_true"] + noise
    )
    if getattr(ident, "reference_halves", False):
        _second_half(f, confound.cos_sd, sd, rng)
    return f


def _built_type(manipulation: str, level: float) -> tuple[float, float]:
    """(mean AUROC, mean effect) of a built direction type in v3 (:data:`V3_BUILT`),
    interpolated between v3's levels (shrinkage and size on a log scale) and held at the
    ends, so a grid with other levels gets its neighbours' values."""
    table = V3_BUILT[manipulation]
    at = sorted(table)
    log = manipulation in ("shrinkage", "size")
    scale = [float(np.log(x)) if log else x for x in at]
    x = float(np.log(level)) if log else level
    auroc = float(np.interp(x, scale, [table[k][0] for k in at]))
    return auroc, float(np.interp(x, scale, [table[k][1] for k in at]))


def _readout(
    f: pd.DataFrame, z_sep: np.ndarray, spread_sd: float, rng: np.random.Generator
) -> None:
    """A class with ``readout`` (geometry_only, flat_readout), in place: each row's
    alignment with the concept (``alignment``, what steers under ``shape: alignment``)
    and, for the built directions, AUROC as a read-out of it.
    A built direction of type t has alignment a = a_t + N(0, alignment_sd), a_t its v3 mean
    effect ÷ the gain; its true AUROC is Φ(probit(p_t) + κ·(a − a_t) + the concept's
    separability) + N(0, ``spread_sd``), p_t v3's mean AUROC of the type: the type's
    offset. A direction made from v* (a rotation, label noise, an iso-cos mixture) has
    v*'s alignment times its cos to v*, and keeps the toy's AUROC."""
    from scipy.stats import norm

    r = READOUT
    n = len(f)
    built = f["manipulation"].isin(list(V3_BUILT)).to_numpy()
    means = [  # the rows not built keep their AUROC: a placeholder type for them
        _built_type(m, float(lv)) if b else (0.5, 0.0)
        for m, lv, b in zip(f["manipulation"], f["level"], built, strict=True)
    ]
    p_t = np.array([m[0] for m in means])
    a_t = np.array([m[1] for m in means]) / r["alignment_gain"]
    a = a_t + r["alignment_sd"] * rng.standard_normal(n)
    ref = f.assign(a=a)[f["manipulation"] == REFERENCE].set_index("concept")["a"]
    derived = f["true_cos"].to_numpy() * f["concept"].map(ref).to_numpy()
    f["alignment"] = np.where(built, a, derived)
    concept = f["concept"].str.slice(1).astype(int).to_numpy()
    z = (
        norm.ppf(p_t)
        + r["probit_per_alignment"] * (a - a_t)
        + r["separability_probit_sd"] * z_sep[concept]
    )
    read = norm.cdf(z) + spread_sd * rng.standard_normal(n)
    f["auroc_true"] = np.where(built, np.clip(read, 0.3, 1.0), f["auroc_true"])


def _second_half(f: pd.DataFrame, cos_sd: float, auroc_sd: float, rng: np.random.Generator) -> None:
    """What ``identify.reference_halves`` adds to a toy (drawn after everything else, so
    the other columns stay as without it): ``cos_half``, the true cosine measured again
    with an independent error as large as the reference's own (the halves are
    exchangeable), and ``auroc_error_within``, one split's estimate of each row's AUROC
    error variance inside its equal-geometry cell (cells.build_tables takes 50 splits)."""
    from experiments.identify.estimation.variance import equal_geometry_rows

    f["cos_half"] = f["true_cos"] + cos_sd * rng.standard_normal(len(f))
    delta = pd.Series(auroc_sd * rng.standard_normal(len(f)), index=f.index)
    rows = equal_geometry_rows(f)
    deviation = delta[rows.index] - delta[rows.index].groupby(rows["cell"]).transform("mean")
    f["auroc_error_within"] = np.nan
    f.loc[rows.index, "auroc_error_within"] = deviation**2
