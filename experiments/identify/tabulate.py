"""Stage 8 of the identification study: the directions table from the stage outputs,
the analysis, the between-concept view, the generation cross-check, the subset's and
name-free columns, and the Phase 6 re-analysis when one is named (``study.py`` runs the
stages; ``analysis.py`` and ``estimator.py`` hold the statistics)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from experiments.identify.measures import outcome_columns
from experiments.identify.pipeline import Directions
from experiments.identify.stages.directions import REFERENCE
from experiments.identify.stages.subset import name_free_columns, subset_columns
from experiments.record import (
    BetweenConcepts,
    EstimandResult,
    GeneratedCheck,
    Phase6Reanalysis,
    PrimarySpec,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from experiments.config import IdentifyStudyConfig
    from experiments.identify.estimation.analysis import Analysis
    from experiments.identify.estimation.cells import StudyTables
    from experiments.identify.heldout.prereg import Preregistration
    from experiments.identify.pipeline import Outcomes
    from experiments.kernel.lifecycle import RunSession


def ranked_labels(found: Directions, concept: str) -> np.ndarray:
    """The labels of the texts a concept's directions were ranked on: the test split's,
    or test and validation together (``identify.auroc_texts: held_out``)."""
    labels = found.detections[(concept, REFERENCE)].labels
    return found.data.concepts[concept].test[1] if labels is None else labels


def effects_by_direction(
    records: list[dict[str, Any]], strengths: list[float]
) -> dict[tuple[str, str], np.ndarray]:
    """Per (concept, direction): the per-pair effect, averaged over the strengths."""
    by: dict[tuple[str, str], dict[float, dict[int, float]]] = {}
    for r in records:
        by.setdefault((r["concept"], r["direction"]), {}).setdefault(r["strength"], {})[
            r["pair"]
        ] = r["e"]
    out: dict[tuple[str, str], np.ndarray] = {}
    for key, per_s in by.items():
        if all(s in per_s for s in strengths):
            pairs = sorted(per_s[strengths[0]])
            out[key] = np.mean([[per_s[s][p] for p in pairs] for s in strengths], axis=0)
    return out


@dataclass
class Analysed:
    """What stage 8 gives the record and the views: the tables, the analysis
    (``analysis.analyse``'s blocks, the record's fields of the same names), the
    between-concept view, the generation check, the Phase 6 re-analysis when one is
    named, and the pre-registration the primary was read under."""

    tables: StudyTables
    analysis: Analysis
    between: BetweenConcepts
    validation: GeneratedCheck
    prereg: Preregistration | None = None
    phase6_frame: pd.DataFrame | None = None
    phase6: Phase6Reanalysis | None = None


def analyse_study(
    session: RunSession[IdentifyStudyConfig],
    config: IdentifyStudyConfig,
    found: Directions,
    outcomes: Outcomes,
    prereg: Preregistration | None,
    say: Callable[[str], None],
) -> Analysed:
    """Stage 8: the tables, the analysis, the between-concept view, the generation check,
    and the Phase 6 re-analysis when one is named."""
    from experiments.identify.estimation import analysis as analysis_mod
    from experiments.identify.estimation.cells import build_tables, measure_halves
    from experiments.identify.estimation.crosscheck import canonical, crosscheck
    from experiments.identify.subset_analysis import subset_outcomes
    from experiments.kernel.plan import PROMPT_ARM

    ident, concepts = config.identify, found.concepts
    strengths = [float(x) for x in ident.strengths]
    primary_strength = prereg.primary.at_strength if prereg else None
    # the effect: at the pre-registered strength when it is measured, else the mean over
    # the strengths; every strength also gets its own column (the dose: 0.5x, 1x, 2x β)
    main = [primary_strength] if primary_strength in strengths else strengths
    effects = effects_by_direction(outcomes.likelihood, main)
    # the labels of the texts each concept's AUROC ranked (identify.auroc_texts)
    test_labels = {c: ranked_labels(found, c) for c in concepts}
    tables = build_tables(
        found.directions, found.detections, test_labels, effects, outcomes.outputs, ident,
        config.seed,
    )  # fmt: skip
    if len(strengths) > 1:
        frame = tables.directions
        for strength in strengths:
            per_pair = effects_by_direction(outcomes.likelihood, [strength])
            at = {k: float(np.mean(v)) for k, v in per_pair.items()}
            name = f"effect_at_{strength:g}"
            tables.halves[name] = measure_halves(per_pair, tables.order, config.seed, name)
            frame[name] = [
                at.get((c, d), np.nan)
                for c, d in zip(frame["concept"], frame["direction"], strict=True)
            ]
    name_free_columns(tables.directions, found.name_free_auroc)
    if outcomes.subset:
        subset_columns(tables.directions, outcomes.dose, outcomes.generated)
        outcome_columns(tables.directions, outcomes)
    base = pd.DataFrame(outcomes.baseline_rows)
    baseline = (  # concept -> its mean prompting-baseline effect
        cast(dict[str, float], base.groupby("concept")["e"].mean().to_dict()) if len(base) else {}
    )
    n_boot, seed = config.criteria.n_boot, config.seed
    # a shard scores no primary: the pre-registration reads it once, on the pool
    scored = prereg.primary if prereg and ident.shard is None else None
    analysis = analysis_mod.analyse(tables, baseline, ident.targets, scored, n_boot, seed)
    if prereg and ident.shard is not None:
        withhold_primaries(analysis.estimands, prereg.primary)
    if outcomes.subset:
        analysis.identified.subset = subset_outcomes(
            tables.directions, outcomes.subset, n_boot=n_boot, seed=seed
        )
    between = analysis_mod.between_concepts(
        tables, test_labels, found.detections, effects, n_boot, seed
    )
    # the cross-check reads the validating tags only (the subset's directions are its own)
    tags = {canonical(d) for d in ident.generated} | {"null", PROMPT_ARM}
    gen, units = outcomes.generated, outcomes.generated_units
    if len(gen):
        gen, units = gen[gen["direction"].isin(tags)], units[units["direction"].isin(tags)]
    validation = crosscheck(tables, gen, units, effects, n_boot, seed)
    phase6_frame, phase6 = None, None
    if ident.phase6_run:
        from experiments.identify.estimation.phase6 import reanalyse

        phase6_frame, phase6 = reanalyse(ident.phase6_run, session.model, n_boot, seed, say)
    return Analysed(tables, analysis, between, validation, prereg, phase6_frame, phase6)


# What a shard's record says instead of a primary's estimand
WITHHELD = "a pre-registered primary's estimand: scored once, on the pooled shards (identify pool)"


def withhold_primaries(estimands: dict[str, EstimandResult], primary: PrimarySpec) -> None:
    """A shard scores no primary, nor the estimand a primary is (P1's
    ``practitioner_equal_norm``, P2's ``practitioner_full_data``): the same number under
    another row would let one shard be read before the pool. Those rows stay in the
    record, not evaluable, with :data:`WITHHELD` as the reason."""
    from experiments.identify.heldout.prereg import primaries

    for spec in primaries(primary):
        name = str(spec.estimand)
        if name in estimands:
            estimands[name] = estimands[name].model_copy(
                update={"status": "not_evaluable", "reason": WITHHELD, "fit": None,
                        "correction": None}
            )  # fmt: skip
