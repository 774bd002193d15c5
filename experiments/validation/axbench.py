"""Part C with AxBench's rubric: comparable judge scores beside Δ and the likelihood outcome.

AxBench, SteerEval and HyperSteer compare steering methods by an LLM judge's concept,
instruction and fluency scores (0-2 each) combined by harmonic mean. ``steer-eval panel
--rubric axbench`` rates every generation of a run that way (``judges.AXBENCH_RUBRIC``)
and this module turns the ratings into one row per concept × sign of the strength: the
steered texts' mean scores per judge and over the panel, the same for their unsteered
twins (same concept, prompt and sample at s = 0), the paired Δ effect, the likelihood
outcome from the run's record, and how the judges agree on the harmonic mean.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from experiments.record.identify import RubricValidity
    from experiments.validation.runs import Phase5Run
    from judges.panel import PanelResult

CHILD_RUN_NAME = "judge-panel-axbench"
CHILD_PHASE = "5C-axbench"
AXES = {"concept_score": "concept", "instruction": "instruction", "fluency": "fluency"}
TWIN_KEYS = ("synset", "prompt_index", "sample", "split")


class AxbenchOutcome(NamedTuple):
    """What ``panel --rubric axbench`` did for one run."""

    result: PanelResult
    table: pd.DataFrame  # one row per concept × sign
    skipped: dict[str, str]  # judges that could not run here, and why
    validity: RubricValidity | None  # an identify run's: identify.rubric.rubric_validity


def _sign(strength: float) -> str:
    return "pos" if strength > 0 else "neg"


def axbench_table(
    samples: pd.DataFrame, result: PanelResult, per_concept: dict[str, dict[str, float | None]]
) -> pd.DataFrame:
    """One row per concept × sign: the steered texts of the concept arm against their
    unsteered twins, scored by every judge (``hm`` = AxBench's harmonic mean)."""
    import pandas as pd

    scores = result.scores.rename(columns={"score": "hm"})
    long = scores.merge(samples, on="sample_id", how="left")
    twins = samples[samples["strength"] == 0.0].drop_duplicates(list(TWIN_KEYS))
    twin_of = samples.merge(
        twins[[*TWIN_KEYS, "sample_id", "delta"]],
        on=list(TWIN_KEYS),
        suffixes=("", "_twin"),
    ).set_index("sample_id")
    steered = long[(long["arm"] == "concept") & (long["strength"] != 0.0)].copy()
    steered["sign"] = steered["strength"].map(_sign)
    steered["twin"] = steered["sample_id"].map(twin_of["sample_id_twin"])
    by_twin = scores.set_index(["sample_id", "judge"])
    rows = []
    for (synset, sign), group in steered.groupby(["synset", "sign"], sort=True):
        texts = group.drop_duplicates("sample_id")
        delta = texts["delta"].to_numpy() - texts["sample_id"].map(twin_of["delta_twin"]).to_numpy()
        lk = per_concept.get(str(synset), {}).get(f"likelihood_{sign}")
        row: dict[str, object] = {
            "concept": synset,
            "concept_name": texts["concept"].iloc[0],
            "sign": sign,
            "n_texts": len(texts),
            "delta_effect": float(np.nanmean(delta)) if len(delta) else None,
            "likelihood": lk,
        }
        panel_hm, panel_twin = [], []
        for judge, rated in group.groupby("judge", sort=True):
            for column, axis in AXES.items():
                row[f"{judge}:{axis}"] = _mean(rated[column])
            row[f"{judge}:hm"] = _mean(rated["hm"])
            keys = [(t, judge) for t in rated["twin"] if (t, judge) in by_twin.index]
            twin_hm = by_twin["hm"].loc[keys] if keys else pd.Series(dtype=float)
            row[f"{judge}:hm_twin"] = _mean(twin_hm)
            panel_hm.append(row[f"{judge}:hm"])
            panel_twin.append(row[f"{judge}:hm_twin"])
        row["panel:hm"] = _mean(pd.Series(panel_hm, dtype=float))
        row["panel:hm_twin"] = _mean(pd.Series(panel_twin, dtype=float))
        rows.append(row)
    return pd.DataFrame(rows)


def _mean(values: pd.Series) -> float | None:
    values = values.astype(float).dropna()
    return float(values.mean()) if len(values) else None


def agreement(result: PanelResult) -> dict[str, float | None]:
    """How the judges agree on the harmonic mean: Krippendorff's α (interval) and the
    pairwise Spearman correlations; None where not evaluable (one judge, too few texts)."""
    from metrics.stats import Alpha, Correlation

    out: dict[str, float | None] = {
        "alpha": result.alpha.value if isinstance(result.alpha, Alpha) else None
    }
    for (a, b), stat in result.pairwise_spearman.items():
        # MLflow metric names allow letters, digits, _-. :/ and spaces: no "~"
        out[f"spearman:{a} vs {b}"] = stat.r if isinstance(stat, Correlation) else None
    return out


def log_axbench(
    parent: Phase5Run,
    result: PanelResult,
    table: pd.DataFrame,
    skipped: dict[str, str],
    budget: float | None,
    validity: RubricValidity | None = None,
) -> str:
    """The table in the run folder (``axbench_scores.csv``) and one ``judge-panel-axbench``
    child run (a rerun updates it): scores, agreement, the rubric in the prompt registry;
    for an identify run its ``validity`` too (metrics ``rubric/<key>``, the JSON and a
    note)."""
    import json

    from experiments.identify.estimation.rubric import validity_lines, validity_metrics
    from experiments.kernel.publisher import ChildUpdate
    from experiments.phase5.samples import samples_csv
    from experiments.rundir import RunDir
    from experiments.tracking.prompts import register_rubric
    from judges import AXBENCH_RUBRIC

    csv_text = samples_csv(table)  # cells no spreadsheet executes (the suite's sanitiser)
    if parent.folder.exists():
        parent.folder.file(RunDir.AXBENCH).write_text(csv_text)
    metrics = {f"agreement/{k}": v for k, v in agreement(result).items() if v is not None}
    for column in (c for c in table.columns if ":" in c):
        for sign, rows in table.groupby("sign"):
            values = rows[column].astype(float).dropna()
            if len(values):
                metrics[f"{column.replace(':', '/')}/{sign}"] = float(values.mean())
    metrics.update({f"total_{k}": float(v) for k, v in result.totals.items()})
    params: dict[str, object] = {"judges": result.judges, "budget_usd": budget, "rubric": "axbench"}
    for judge, desc in result.judge_params.items():
        params.update({f"judge.{judge}.{k}": v for k, v in desc.items()})
    files = {RunDir.AXBENCH: csv_text}
    note = ""
    if validity is not None:
        metrics.update(validity_metrics(validity))
        files[RunDir.AXBENCH_IDENTIFY] = json.dumps(validity.stored(), indent=1)
        lines = "\n".join(f"- {line.strip()}" for line in validity_lines(validity))
        note = f"# AxBench rubric on identify\n\n{lines}\n"

    def build(_child: str, _step: int) -> ChildUpdate:
        rubric = register_rubric(AXBENCH_RUBRIC)
        return ChildUpdate(
            tags={
                "panel.judges": ", ".join(result.judges),
                "panel.skipped": json.dumps(skipped) if skipped else "none",
                "panel.rubric_prompt": rubric.uri,
            },
            params={**params, "rubric_version": rubric.rubric_version},
            metrics=metrics,
            prompts=[rubric.uri],
            tables={"judge_scores.json": result.scores, "axbench_per_concept.json": table},
            files=files,
            note=note,
        )

    return parent.update_child(CHILD_PHASE, CHILD_RUN_NAME, "axbench.runs", build)


def run_axbench_for(
    run_id: str,
    judges: list[str],
    budget: float | None,
    openai_base_url: str | None = None,
    results_dir: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    cache_dir: str | Path | None = None,
    experiment: str | None = None,
    limit: int | None = None,
) -> AxbenchOutcome:
    """``steer-eval panel --rubric axbench`` for one run: rate, tabulate, log. Criterion 4
    (defined on the relatedness rubric) is left as it was; the seed's trigger does not
    apply (AxBench scores are wanted whatever the human correlation). A Phase 5 or an
    identify run; for identify, also the rubric's validity as an outcome of the direction
    (:func:`identify_validity`)."""
    from experiments.rundir import RunDir
    from experiments.validation.panel import rate_run
    from experiments.validation.runs import IDENTIFY_PHASE, PHASE, phase5_parent

    parent = phase5_parent(run_id, experiment, results_dir, phases=(PHASE, IDENTIFY_PHASE))
    samples, result, skipped = rate_run(
        parent, judges, budget, openai_base_url, progress, cache_dir, limit, "axbench"
    )
    record = parent.folder.file(RunDir.RECORD)
    per_concept = parent.folder.read_record(migrate=True).per_concept if record.exists() else {}
    table = axbench_table(samples, result, per_concept)
    validity = identify_validity(parent, samples, result) if parent.is_identify else None
    log_axbench(parent, result, table, skipped, budget, validity)
    return AxbenchOutcome(result, table, skipped, validity)


def identify_validity(
    parent: Phase5Run, samples: pd.DataFrame, result: PanelResult, n_boot: int = 2000
) -> RubricValidity:
    """For an identify run: the rubric as an outcome of the direction among good
    directions (``identify.rubric.rubric_validity``: its split-half reliability and its
    disattenuated agreement with the likelihood and the gated Δ), written to the run
    folder (``RunDir.AXBENCH_IDENTIFY``). Read from the run folder, which must be here."""
    import pandas as pd

    from experiments.identify.estimation.rubric import GENERATED, rubric_units, rubric_validity
    from experiments.identify.tabulate import effects_by_direction
    from experiments.kernel.effect import paired_effects
    from experiments.rundir import RunDir
    from experiments.validation.errors import ValidationInputError

    folder = parent.folder
    missing = [n for n in (RunDir.DIRECTIONS, RunDir.LIKELIHOOD) if not folder.file(n).exists()]
    if missing:
        raise ValidationInputError(
            f"identify run {parent.run_id}: its folder {folder.path} lacks {', '.join(missing)}; "
            "the rubric's reliability is read from the folder of the machine that ran it "
            "(--results-dir names another results folder)"
        )
    units = rubric_units(samples, result.scores)
    records = pd.DataFrame([g.row() for g in parent.scored_generations()])
    gated = paired_effects(records, parent.config).set_index("key")[GENERATED]
    units[GENERATED] = units["sample_id"].map(gated)
    validity = rubric_validity(
        units,
        pd.read_csv(folder.file(RunDir.DIRECTIONS)),
        effects_by_direction(folder.read_likelihood(), [1.0]),
        n_boot=n_boot,
        seed=parent.config.seed,
    )
    validity.judges = list(result.judges)
    folder.write_json(RunDir.AXBENCH_IDENTIFY, validity.stored())
    return validity
