"""Does the likelihood outcome agree with generated texts? (the validating subset)

For the directions of ``identify.generated``, the gated generation effect (Δ, s = +1,
report prompts × samples) is set beside the likelihood effect of the same (concept,
direction): their Pearson r over all cells, within concepts (demeaned), and across
concepts at v*, each with a concept-level interval, and the within-concept r corrected
for both measures' split-half reliabilities.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.identify.estimation import stats
from experiments.identify.estimation.cells import N_SPLITS, StudyTables, halves_of_units
from experiments.identify.stages import manipulations
from experiments.identify.stages.directions import REFERENCE
from experiments.record import GeneratedCheck
from metrics.intervals import Interval, hierarchical_correlation, hierarchical_mean
from metrics.reliability import split_orders
from steering.nulls import seeded_rng

GEN = "e_gen"


def canonical(direction: str) -> str:
    """A validation id as the tables name it (an id at its manipulation's reference level,
    θ = 0, ρ = 0 or λ = 1, is v*)."""
    family = manipulations.family(direction)
    return REFERENCE if family is not None and family.reproduces_reference(direction) else direction


def unit_halves(
    units: pd.DataFrame, frame: pd.DataFrame, column: str, seed: int, name: str = "gen-halves"
) -> dict[str, np.ndarray]:
    """Per concept, [directions, splits, 2]: the mean of ``column`` over each half of a
    direction's generations (``units``: one row per text, keyed by prompt and sample), for
    the (concept, direction) rows of ``frame``, the same seeded splits for every direction
    of a concept (they share prompts and samples). A concept whose directions hold unequal
    numbers of texts, or fewer than 2, is left out."""
    out = {}
    for concept, group in frame.groupby("concept", sort=True):
        rows = []
        for direction in group["direction"]:
            u = units[(units["concept"] == concept) & (units["direction"] == direction)]
            rows.append(u.sort_values(["prompt_index", "sample"])[column].to_numpy(float))
        sizes = {len(r) for r in rows}
        if len(sizes) != 1 or min(sizes) < 2:
            continue
        values = np.stack(rows)
        orders = split_orders(values.shape[1], N_SPLITS, rng=seeded_rng(seed, name, concept))
        out[str(concept)] = halves_of_units(values, orders)
    return out


def crosscheck(
    tables: StudyTables,
    cells: pd.DataFrame,
    units: pd.DataFrame,
    effects: dict[tuple[str, str], np.ndarray],
    n_boot: int,
    seed: int,
) -> GeneratedCheck:
    """The agreement of the two outcomes, and the generation-side baseline and null."""
    if cells.empty:
        return GeneratedCheck(reason="no generations")
    gen, units = cells[cells["sign"] == 1].copy(), units[units["sign"] == 1].copy()
    for f in (gen, units):  # the generation arms keep their names
        f["direction"] = f["direction"].map(
            lambda d: d if d in ("null", "prompt") else canonical(d)
        )
    frame = gen.merge(tables.directions, on=["concept", "direction"], how="inner")
    if frame.empty:
        return GeneratedCheck(n_cells=0)
    between = None
    ref = frame[frame["direction"] == REFERENCE]
    if ref["concept"].nunique() >= 3:
        at_ref = units[units["direction"] == REFERENCE]
        x = {c: at_ref[at_ref["concept"] == c]["e_gated"].to_numpy(float) for c in ref["concept"]}
        y = {c: np.asarray(effects[(c, REFERENCE)]) for c in ref["concept"]}
        between = hierarchical_correlation(x, y, n_boot=n_boot, seed=seed)
    arms: dict[str, Interval] = {}
    for arm in ("null", "prompt", REFERENCE):
        part = units[units["direction"] == arm]
        groups = {c: g["e_gated"].to_numpy(float) for c, g in part.groupby("concept")}
        if len(groups) >= 2:
            arms[f"generation_{arm}"] = hierarchical_mean(groups, n_boot=n_boot, seed=seed)
    return GeneratedCheck(
        evaluable=True,
        n_cells=len(frame),
        pooled_r=stats.pooled_correlation(frame, GEN, "effect", n_boot=n_boot, seed=seed),
        within=stats.disattenuated_within(
            frame,
            GEN,
            "effect",
            unit_halves(units, frame, "e_gated", seed),
            tables.halves_for("effect", frame),
            n_boot=n_boot,
            seed=seed,
        ),
        between_at_reference=between,
        **arms,
        per_direction=[
            {"direction": d, **{k: float(g[k].mean()) for k in (GEN, "effect", "auroc")}}
            for d, g in frame.groupby("direction", sort=True)
        ],
    )
