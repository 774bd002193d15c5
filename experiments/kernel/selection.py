"""Stage: held-out strength selection, β chosen per concept on the selection prompts.

Phase 5 (``selection.mode: heldout``) runs it once; Phase 6 once per probe set, tagging
the rows with the probe set (``vectors_tag``). The choice itself is
:func:`experiments.kernel.effect.select_betas`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import pandas as pd

from experiments.config import RunConfig
from experiments.kernel.effect import BetaChoice, select_betas
from experiments.kernel.generate import generate
from experiments.kernel.plan import build_plan
from experiments.kernel.score import Scorer, score_all
from experiments.kernel.vectors import VectorSet
from experiments.rundir import join_scores, plan_order
from steering.generation import BatchStats

C = TypeVar("C", bound=RunConfig)  # the session's phase config

if TYPE_CHECKING:
    from experiments.kernel.lifecycle import RunSession


def select_strengths(
    session: RunSession[C],
    config: RunConfig,
    vectors: VectorSet,
    scorer: Scorer,
    on_batch: Callable[[int, int], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    vectors_tag: str | None = None,
) -> tuple[dict[str, BetaChoice], BatchStats]:
    """Generate the selection prompts over the β grid (rows not yet in the run folder),
    score them and choose β per concept: (the choices, generation stats). ``config`` is
    the session's, or a probe set's variant of it (Phase 6)."""
    assert session.run_dir is not None, "start the session's run first"
    plan = build_plan(config, session.graph, vectors, "selection", vectors_tag=vectors_tag)
    stats = generate(session, plan, vectors, on_batch, on_step, config=config)
    rows = [g for g in plan_order(session.run_dir.read_generations()) if g["key"] in plan.meta]
    with session.timer.time("embedding"):
        scores = score_all(scorer, rows)
    return select_betas(pd.DataFrame(join_scores(rows, scores)), config), stats
