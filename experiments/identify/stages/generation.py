"""Generated texts: the reference direction's held-out strength, and a validating subset.

Both use the Phase 5 stages unchanged (``kernel/plan``, ``generate``, ``score``,
``effect``), on vector sets whose concept "probe" is a chosen direction:

* **β per concept** (:func:`select_reference_betas`): the reference direction v* is
  generated on the selection prompts over ``selection.beta_grid`` and β is chosen per
  concept as Phase 5 and Phase 6 choose it (``kernel/selection.py``). Every
  direction of the concept is then measured at that β: the strength is held fixed
  while the direction changes.
* **validation** (:func:`validation_effects`): a few directions per concept
  (``identify.generated``) are generated on the report prompts at β and scored by Δ
  (gated effect, the random-direction null and the prompting arm beside them), so the
  likelihood outcome of the dense grids can be checked against generated texts.
  Rows that do not depend on the direction (unsteered twins, the null, the prompt arm)
  have the same keys for every direction and are generated once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import pandas as pd
import torch

from experiments.concepts import ConceptGraph
from experiments.config import RunConfig
from experiments.kernel.effect import BetaChoice, paired_effects
from experiments.kernel.generate import generate
from experiments.kernel.lifecycle import RunSession
from experiments.kernel.plan import CONCEPT_ARM, PROMPT_ARM, build_plan
from experiments.kernel.score import Scorer, score_all
from experiments.kernel.selection import select_strengths
from experiments.kernel.vectors import VectorSet, random_directions
from experiments.rows import number as real
from experiments.rundir import join_scores, plan_order
from steering.vector import Direction, SteeringVector

C = TypeVar("C", bound=RunConfig)  # the session's phase config

REFERENCE_TAG = "reference"


def vector_set(
    config: RunConfig, layer: int, alpha: float, directions: Sequence[Direction]
) -> VectorSet:
    """A VectorSet steering each direction's concept along it, with the run's isotropic
    random nulls (the pipeline's seeded draws) beside it."""

    def vector(d: torch.Tensor, source: str) -> SteeringVector:
        return SteeringVector.from_direction(
            torch.as_tensor(d, dtype=torch.float32),
            layer,
            alpha=alpha,
            beta=config.steering.beta,
            mode=config.steering.mode,
            source=source,
        )

    hidden = len(directions[0].vector)
    return VectorSet(
        layer,
        alpha,
        {d.concept: vector(d.vector, "identify") for d in directions},
        {
            d.concept: [
                vector(r, "random")
                for r in random_directions(
                    config.seed, d.concept, config.controls.random_directions, hidden
                )
            ]
            for d in directions
        },
    )


def select_reference_betas(
    session: RunSession[C],
    config: RunConfig,
    vectors: VectorSet,
    scorer: Scorer,
    on_batch: Callable[[int, int], None] | None = None,
) -> dict[str, BetaChoice]:
    """β per concept for v*, chosen on the selection prompts (Phase 5's rule)."""
    if config.selection.mode != "heldout":
        beta = real(config.steering.beta)  # "auto" is a Phase 5 run's alone (its config)
        return {c: BetaChoice(beta=beta, effects={}) for c in vectors.vectors}
    chosen, _ = select_strengths(
        session, config, vectors, scorer, on_batch, vectors_tag=REFERENCE_TAG
    )
    return chosen


def generate_validation(
    session: RunSession[C],
    config: RunConfig,
    sets: dict[str, VectorSet],
    betas: dict[str, float],
    on_batch: Callable[[int, int], None] | None = None,
    graph: ConceptGraph | None = None,
) -> None:
    """Generate the report rows of every validation direction (tag -> its vector set), on
    ``graph``'s concepts (default: the run's)."""
    assert session.run_dir is not None
    for tag, vectors in sets.items():
        plan = build_plan(config, graph or session.graph, vectors, "report", betas, vectors_tag=tag)
        generate(session, plan, vectors, on_batch, config=config)


def validation_effects(
    session: RunSession[C], config: RunConfig, scorer: Scorer, tags: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Score every generation of the run folder; return (cells, units).

    ``cells``: per (concept, direction tag, sign) the mean gated effect e of the report
    rows, the random null's and the prompting arm's on the same units; ``units``: one row
    per steered report generation (for split-half reliabilities)."""
    assert session.run_dir is not None
    generations = plan_order(session.run_dir.read_generations())
    with session.timer.time("embedding"):
        scores = score_all(scorer, generations)
    session.run_dir.write_scores(scores)
    records = pd.DataFrame(join_scores(generations, scores))
    report = records[records["split"] == "report"]
    if report.empty:
        return pd.DataFrame(), pd.DataFrame()
    effects = paired_effects(report, config)
    vectors = effects["vectors"] if "vectors" in effects.columns else pd.Series(None, effects.index)
    arm = np.where(
        effects["arm"] == CONCEPT_ARM,
        vectors.fillna(""),
        np.where(effects["arm"].str.startswith("random:"), "null", effects["arm"]),
    )
    units = effects.assign(direction=arm)[
        ["concept", "direction", "sign", "prompt_index", "sample", "e", "e_gated", "gate_pass"]
    ]
    units = units[units["direction"].isin([*tags, "null", PROMPT_ARM])]
    cells = (
        units.groupby(["concept", "direction", "sign"])
        .agg(
            e_gen=("e_gated", "mean"),
            e_gen_raw=("e", "mean"),
            gate=("gate_pass", "mean"),
            n=("e", "size"),
        )
        .reset_index()
    )
    return cells, units.reset_index(drop=True)
