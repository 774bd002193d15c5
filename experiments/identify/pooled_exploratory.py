"""After the pooled primary: every other estimand on the same pooled shards, exploratory.

``steer-eval identify pool --exploratory`` reads the committed shard folders
(``shards.read_shards``, the same checks of pre-registration and binding), refuses until
the pooled primary has been scored (the confirmatory answer comes first, once), and writes
beside it, in ``<shards_dir>/<experiment>/pooled/``:

* ``exploratory.json``: every estimand of ``estimands.py`` on the pooled table under its
  own name (the primary among them, recomputed with this code, for comparison only), the
  practitioner's variance components (``variance.components``), and the primary taken
  apart by family (``families.decompose``: each family's share of the slope's numerator,
  the slope without each family and within each, AUROC beside the cosine to an
  independent half's diffmean);
* ``per_concept.png``: each family's mean AUROC and effect within concepts, and the
  concepts' own slopes around the scored primary;
* ``per_concept.csv``: per concept, the built directions' spread and the concept's own
  within-concept slope (least squares of the likelihood effect on AUROC over its built
  directions), its shard and device, so the pooled slope can be read concept by concept.

It scores nothing held out and writes no ledger entry: the verdict stays the pooled
scoring's. The outcomes' split-half reliabilities need each shard's per-pair likelihood
rows, which stay in the shard's run folder; a shard keeps its record's reliabilities in
its committed folder (``reliability.json``), and they are reported per shard beside the
pre-registration's floor (shards kept before that are named as keeping none).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from experiments.identify.heldout.prereg import (
    POOLED,
    Preregistration,
    PreregistrationError,
    binding,
)
from experiments.identify.heldout.shards import (
    POOLED_RECORD,
    RELIABILITY_FILE,
    ShardRun,
    pooled_directions,
    read_shards,
    shard_folder,
    shards_root,
)
from experiments.record.pooled import (
    ExploratoryRecord,
    FloorOutcome,
    PerConceptSummary,
    PooledRecord,
    ScoredPrimary,
    ShardReliabilities,
)
from experiments.rundir import atomic_write_text, neutralise
from metrics.intervals import Interval

if TYPE_CHECKING:
    from experiments.config import IdentifyStudyConfig

EXPLORATORY_RECORD = "exploratory.json"
# The likelihood's split-half reliability among the built directions, and the floor below
# which the v3 pre-registration calls the primary uninformative.
PRIMARY_RELIABILITY = "effect_practitioner_directions"
FLOOR = 0.5
PER_CONCEPT = "per_concept.csv"
PER_CONCEPT_FIGURE = "per_concept.png"  # families' means and the concepts' own slopes


def per_concept(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per concept over its built directions (``variance.practitioner_rows``):
    how many, v*'s AUROC and effect, the AUROC and effect spread, and the concept's own
    least-squares slope of effect on AUROC (NaN when its AUROC does not vary)."""
    from experiments.identify.estimation.variance import practitioner_rows
    from experiments.identify.stages.directions import REFERENCE

    rows = []
    for concept, part in practitioner_rows(frame).groupby("concept", sort=False):
        ref = part[part["direction"] == REFERENCE]
        x, y = part["auroc"].to_numpy(float), part["effect"].to_numpy(float)
        spread = float(np.std(x))
        slope = float(np.polyfit(x, y, 1)[0]) if len(x) > 1 and spread > 0 else np.nan
        rows.append(
            {
                "concept": neutralise(str(concept)),
                "shard": int(part["shard"].iloc[0]),
                "device": neutralise(str(part["device"].iloc[0])),
                "n_built": len(part),
                "auroc_reference": float(ref["auroc"].iloc[0]) if len(ref) else np.nan,
                "effect_reference": float(ref["effect"].iloc[0]) if len(ref) else np.nan,
                "auroc_sd": spread,
                "effect_sd": float(np.std(y)),
                "slope": slope,
            }
        )
    return pd.DataFrame(rows)


def shard_reliabilities(config: IdentifyStudyConfig, n: int) -> ShardReliabilities:
    """Each shard's outcome reliabilities where its committed folder keeps them
    (``reliability.json``), by key and shard, with the shards that keep none: the
    pre-registration calls the primary uninformative if the likelihood's reliability among
    the built directions falls below :data:`FLOOR`."""
    by_key: dict[str, dict[str, Interval]] = {}
    without = []
    for k in range(n):
        path = shard_folder(config, k) / RELIABILITY_FILE
        if not path.is_file():
            without.append(k)
            continue
        for key, value in json.loads(path.read_text(encoding="utf-8")).items():
            by_key.setdefault(key, {})[str(k)] = Interval.of(value)
    built = by_key.get(PRIMARY_RELIABILITY, {})
    estimates = [v.estimate for v in built.values() if v.estimate is not None]
    return ShardReliabilities(
        by_key=by_key,
        shards_without=without,
        primary_outcome=FloorOutcome(
            key=PRIMARY_RELIABILITY, floor=FLOOR, shards=len(estimates),
            min=min(estimates) if estimates else None,
            below_floor=[k for k, v in built.items() if (v.estimate or 0) < FLOOR],
        ),
    )  # fmt: skip


def exploratory_shards(
    config: IdentifyStudyConfig, held: list[str], prereg: Preregistration
) -> list[ShardRun]:
    """The shards the exploratory pass reads, checked as the pool checks them; a
    PreregistrationError until the pooled primary is scored."""
    scored = shards_root(config) / POOLED / POOLED_RECORD
    if not scored.is_file():
        raise PreregistrationError(
            f"the pooled primary is not scored yet ({scored} is missing): run "
            "`steer-eval identify pool` first; the exploratory estimands come after it"
        )
    return read_shards(config, held, prereg, binding(prereg, config))


def pooled_exploratory(
    config: IdentifyStudyConfig, held: list[str], prereg: Preregistration
) -> ExploratoryRecord:
    """The exploratory estimands and the per-concept table on the pooled shards (see the
    module's docstring); a PreregistrationError until the pooled primary is scored."""
    return explore_shards(config, prereg, exploratory_shards(config, held, prereg))


def explore_shards(
    config: IdentifyStudyConfig, prereg: Preregistration, shards: list[ShardRun]
) -> ExploratoryRecord:
    """:func:`pooled_exploratory` on shards already checked (:func:`exploratory_shards`)."""
    from experiments.identify.estimation.estimands import estimate_all
    from experiments.identify.estimation.families import decompose
    from experiments.identify.estimation.variance import components

    folder = shards_root(config) / POOLED
    scored = PooledRecord.model_validate_json((folder / POOLED_RECORD).read_text("utf-8"))
    frame = pooled_directions(shards)
    n_boot, seed = config.criteria.n_boot, config.seed
    table = per_concept(frame)
    slopes = table["slope"].dropna()
    record = ExploratoryRecord(
        label="exploratory: every estimand on the pooled held-out shards, after the "
        "primary was scored",
        primary_scored=ScoredPrimary(verdict=scored.primary.verdict, slope=scored.primary.slope),
        n_concepts=int(frame["concept"].nunique()),
        estimands=estimate_all(frame, n_boot, seed),
        components=components(frame, population="practitioner"),
        per_concept=PerConceptSummary(
            concepts_with_slope=len(slopes),
            positive_share=float((slopes > 0).mean()),
            slope_median=float(slopes.median()),
            auroc_sd_median=float(table["auroc_sd"].median()),
        ),
        reliability=shard_reliabilities(config, len(shards)),
        families=decompose(
            frame, n_boot, seed, str(prereg.primary.hypothesis),
            prereg.primary.equivalence_margin,
        ),
    )  # fmt: skip
    text = json.dumps(record.model_dump(mode="json", exclude_unset=True), indent=1)
    atomic_write_text(folder / EXPLORATORY_RECORD, text + "\n")
    atomic_write_text(folder / PER_CONCEPT, table.to_csv(index=False))
    from experiments.identify.figures import pooled_figure

    pooled_figure(frame, table, record).savefig(folder / PER_CONCEPT_FIGURE, dpi=110)
    return record


def exploratory_markdown(record: ExploratoryRecord) -> str:
    """The estimands as a table under their names, the per-concept summary beside."""
    from experiments.answer import estimate_of
    from experiments.identify.estimation.families import markdown as families_markdown

    lines = [
        f"# {record.label}",
        "",
        f"The scored primary: {estimate_of(record.primary_scored.slope)} — "
        f"**{record.primary_scored.verdict}** ({record.n_concepts} concepts).",
        "",
        "| estimand | estimate (95%) | status |",
        "|---|---|---|",
    ]
    for name, e in record.estimands.items():
        shown = estimate_of(e.fit) if e.fit else e.reason or ""
        lines.append(f"| {name} | {shown} | {e.status} |")
    rel = record.reliability.primary_outcome
    if rel.shards and rel.min is not None:
        lines += [
            "",
            f"The likelihood's reliability among the built directions, in the {rel.shards} "
            f"shards that keep it: lowest {rel.min:.2f} (floor {rel.floor}; below it: "
            f"{', '.join(rel.below_floor) or 'none'}); shards keeping none: "
            f"{', '.join(map(str, record.reliability.shards_without)) or 'none'}.",
        ]
    lines += families_markdown(record.families)
    pc = record.per_concept
    lines += [
        "",
        f"Per concept (built directions): {pc.concepts_with_slope} concepts with a slope, "
        f"{pc.positive_share:.0%} of them positive, median slope {pc.slope_median:+.3f}; "
        f"median AUROC sd among a concept's built directions {pc.auroc_sd_median:.3f}.",
    ]
    return "\n".join(lines) + "\n"
