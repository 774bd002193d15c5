"""The study's tables: one row per (concept, direction), each manipulation's curves, and
the split halves every measure's reliability needs.

``directions``: per concept and direction id, the manipulation and level, the
predictors (AUROC, AP, calibrated F1 of the direction as its own detector; cos(v, v*);
the logit-lens gain; the next-token KL) and the outcome (the likelihood effect, and
above the concept's null: the mean of its isotropic draws, ``null:*`` and
``rotation:isotropic:90``).

``curve(m)``: manipulation m's directions plus v* at the level where the manipulation
passes through it (θ = 0, ρ = 0, λ = 1, the reference size).

Halves: per measure and concept, [directions, splits, 2] values on the two halves of
the measure's units: likelihood text pairs (effect), test texts stratified by label
(AUROC, AP, F1), lens positions, KL prompts. A concept's splits are shared by its
directions (they share the units), drawn once per concept with a seeded generator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from experiments.identify.stages.detect import METRICS, Detection, half_metrics
from experiments.identify.stages.directions import REFERENCE
from experiments.identify.stages.manipulations import is_control, reference_level
from metrics.reliability import split_orders
from steering.nulls import seeded_rng

if TYPE_CHECKING:
    from experiments.config import IdentifyConfig
    from experiments.identify.stages.data import DirectionSet

# The study's predictors of steering, the columns of ``directions`` analysed in this
# order and the only names a pre-registration's primary predictor may take (prereg.py):
# the direction as its own detector (detect.py: METRICS, Detection.metrics) and cos(v, v*);
# then those measured on the model's output (steering/readout.py, per direction in
# outcome.output_predictors: ``outputs[(concept, id)][name]``, one value per unit, so
# they have split halves).
INPUT_PREDICTORS = (*METRICS, "cos_ref")
OUTPUT_PREDICTORS = ("lens", "kl")
PREDICTORS = (*INPUT_PREDICTORS, *OUTPUT_PREDICTORS)
NULL_IDS = ("rotation:isotropic:90",)
N_SPLITS = 50


def is_null(direction: str) -> bool:
    """Whether a direction is part of its concept's null (a control family's, or listed)."""
    return is_control(direction) or direction in NULL_IDS


def null_rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows of a directions table are part of their concept's null: a control
    family's (the isotropic draws ``null:*``) and the directions of ``NULL_IDS``
    (``rotation:isotropic:90``: a random direction orthogonal to v*). A table without
    direction ids (a toy) is read by its manipulation alone."""
    null = frame["manipulation"].map(is_control).astype(bool)
    if "direction" in frame:
        null |= frame["direction"].map(is_null).astype(bool)
    return null


@dataclass
class StudyTables:
    directions: pd.DataFrame
    halves: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # measure->concept
    order: dict[str, list[str]] = field(default_factory=dict)  # concept -> direction ids
    # manipulation -> the level at which its curve passes through v* (None: it does not)
    references: dict[str, float | None] = field(default_factory=dict)

    def curve(self, manipulation: str) -> pd.DataFrame:
        d = self.directions
        rows = d[d["manipulation"] == manipulation]
        level = self.references.get(manipulation)
        if level is not None:
            ref = d[d["direction"] == REFERENCE].assign(manipulation=manipulation, level=level)
            rows = pd.concat([ref, rows], ignore_index=True)
        return rows.sort_values(["concept", "level"]).reset_index(drop=True)

    def manipulations(self) -> list[str]:
        names = self.directions["manipulation"].unique().tolist()
        return [m for m in names if m != REFERENCE and not is_control(m)]

    def pooled(self) -> pd.DataFrame:
        """Every manipulated direction once (v* included, the control family's draws
        left out; ``rotation:isotropic:90`` stays, as the end of its curve)."""
        d = self.directions
        return d[~d["manipulation"].map(is_control)].reset_index(drop=True)

    def primary_rows(self) -> pd.DataFrame:
        """The rows the pre-registered primary is estimated on: every manipulated
        direction once (v* included), every null (:func:`null_rows`) left out."""
        d = self.directions
        return d[~null_rows(d)].reset_index(drop=True)

    def halves_for(self, measure: str, frame: pd.DataFrame) -> dict[str, np.ndarray]:
        """The halves of ``measure`` for the (concept, direction) rows of ``frame``."""
        out = {}
        source = self.halves.get(measure, {})
        for concept, group in frame.groupby("concept", sort=True):
            if concept not in source:
                continue
            key = str(concept)
            index = {d: i for i, d in enumerate(self.order[key])}
            out[str(concept)] = source[key][[index[d] for d in group["direction"]]]
        return out


def halves_of_units(units: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """[directions, units] -> [directions, splits, 2] means of each half."""
    a = units[:, orders[:, 0::2]].mean(axis=-1)
    b = units[:, orders[:, 1::2]].mean(axis=-1)
    return np.stack([a, b], axis=-1)


def measure_halves(
    per_pair: dict[tuple[str, str], np.ndarray], order: dict[str, list[str]], seed: int,
    name: str,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Split halves of one more per-pair measure (e.g. the likelihood effect at one
    strength, ``effect_at_-1``): per concept [directions, splits, 2], its own seeded
    splits of the pairs; a concept missing any direction's pairs is left out."""
    out = {}
    for concept, ids in order.items():
        if not all((concept, d) in per_pair for d in ids):
            continue
        units = np.stack([per_pair[(concept, d)] for d in ids])
        rng = seeded_rng(seed, "halves", concept, name)
        out[concept] = halves_of_units(units, split_orders(units.shape[1], N_SPLITS, rng=rng))
    return out


def _error_within_cells(
    frame: pd.DataFrame, halves: dict[str, np.ndarray], order: dict[str, list[str]]
) -> np.ndarray:
    """Per equal-geometry row, its share of the AUROC's measurement-error variance inside
    its cell (NaN elsewhere): with δ = (AUROC on half A − on half B)/2 per split of the
    test texts (its variance that of the whole test split's error), δ less its cell's mean
    in the same split, squared and averaged over splits. The cell's directions share the
    test texts, so their errors are correlated; taking the deviation within the split
    keeps only the part that varies inside the cell (what ``estimator.equal_geometry``
    corrects for)."""
    from experiments.identify.estimation.variance import equal_geometry_rows

    out = np.full(len(frame), np.nan)
    rows = equal_geometry_rows(frame.assign(_y=0.0), "_y")
    for (concept, _cell), group in rows.groupby(["concept", "cell"], sort=False):
        index = {d: i for i, d in enumerate(order[str(concept)])}
        h = halves[str(concept)][[index[d] for d in group["direction"]]]  # [rows, splits, 2]
        delta = (h[..., 0] - h[..., 1]) / 2
        deviation = delta - delta.mean(axis=0, keepdims=True)
        out[group.index.to_numpy()] = (deviation**2).mean(axis=1)
    return out


def build_tables(
    directions: DirectionSet,
    detections: dict[tuple[str, str], Detection],
    test_labels: dict[str, np.ndarray],
    effects: dict[tuple[str, str], np.ndarray],
    outputs: dict[tuple[str, str], dict[str, np.ndarray]],
    identify: IdentifyConfig,
    seed: int = 0,
) -> StudyTables:
    """Assemble the tables; ``effects[(concept, id)]`` is the per-pair likelihood effect
    (mean over the configured strengths); ``identify`` places v* on each curve; with
    ``directions.second_half`` (identify.reference_halves), each direction's cosine with
    the concept's diffmean from the other half of its templates is ``cos_half``."""
    specs, second_half = directions.specs, directions.second_half
    by_id = {s.id: s for s in specs}
    rows = []
    order: dict[str, list[str]] = {}
    halves: dict[str, dict[str, np.ndarray]] = {m: {} for m in ("effect", *PREDICTORS)}
    for concept in directions.concepts:
        mine = {d.id: d for d in directions.of(concept)}
        ids = [i for i in mine if (concept, i) in effects]
        order[concept] = ids
        v_star = mine[REFERENCE].array()
        for d_id in ids:
            spec = by_id[d_id]
            vector = mine[d_id].array()
            det = detections[(concept, d_id)]
            out = outputs.get((concept, d_id), {})
            rows.append(
                {
                    "concept": concept,
                    "direction": d_id,
                    "manipulation": spec.manipulation,
                    "level": spec.level,
                    "seed": spec.seed,
                    **det.metrics(),
                    "cos_ref": float(vector @ v_star),
                    **({"cos_half": float(vector @ second_half[concept])} if second_half else {}),
                    **(
                        {"cos_validation": float(vector @ directions.validation[concept])}
                        if directions.validation
                        else {}
                    ),
                    **{
                        p: float(np.mean(out[p])) if p in out else np.nan for p in OUTPUT_PREDICTORS
                    },
                    "effect": float(np.mean(effects[(concept, d_id)])),
                    **mine[d_id].facts,
                }
            )
        rng = seeded_rng(seed, "halves", concept)
        pairs = np.stack([effects[(concept, i)] for i in ids])
        halves["effect"][concept] = halves_of_units(
            pairs, split_orders(pairs.shape[1], N_SPLITS, rng=rng)
        )
        labels = test_labels[concept]
        test_orders = split_orders(len(labels), N_SPLITS, strata=list(labels), rng=rng)
        scores = np.stack([detections[(concept, i)].scores for i in ids])
        thresholds = np.array([detections[(concept, i)].threshold for i in ids])
        for metric, value in half_metrics(scores, thresholds, labels, test_orders).items():
            halves[metric][concept] = value
        for measure in OUTPUT_PREDICTORS:
            if all(measure in outputs.get((concept, i), {}) for i in ids):
                units = np.stack([outputs[(concept, i)][measure] for i in ids])
                if units.shape[1] >= 2:
                    orders = split_orders(units.shape[1], N_SPLITS, rng=rng)
                    halves[measure][concept] = halves_of_units(units, orders)
    frame = pd.DataFrame(rows)
    if second_half:
        frame["auroc_error_within"] = _error_within_cells(frame, halves["auroc"], order)
    null = frame[frame["direction"].map(is_null)].groupby("concept")["effect"].mean()
    frame["effect_null"] = frame["concept"].map(null)
    frame["effect_above_null"] = frame["effect"] - frame["effect_null"]
    references = {s.manipulation: reference_level(s.manipulation, identify) for s in specs}
    return StudyTables(frame, halves, order, references)
