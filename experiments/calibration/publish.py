"""Phase 6's views of its record: the curve table, the summary, figures, child runs.

The publisher (``kernel/publisher.py``) writes and mirrors them. The parent run holds
the curve (an MLflow table), every slope and minimum-effective level as metrics with a
status tag each, and the figures; one child run per probe set (training size × source ×
seed × layer) holds its per-concept metrics and points at the generations it produced
(``vectors`` tag in the parent's ``generations.jsonl``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from experiments.answer import estimate_text, number
from experiments.calibration.answer import answer_of
from experiments.kernel.publisher import ChildRun, Views
from experiments.record import CalibrationRecord
from experiments.rundir import RunDir

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PREDICTOR_LABELS = {
    "f1_calibrated": "F1 (threshold from validation)",
    "f1_raw": "F1 at decision > 0",
    "auroc": "AUROC",
    "ap": "average precision",
    "cos_probe_diffmean": "cos(probe, diffmean)",
    "train_separation": "training class separation",
}


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_-." else "_" for ch in text)


def analysis_metrics(record: CalibrationRecord) -> tuple[dict[str, float | None], dict[str, str]]:
    """Every slope and minimum effective level as metrics, with a status tag each."""
    metrics: dict[str, float | None] = {}
    tags: dict[str, str] = {}
    for fit in record.results:
        name = f"L{fit.layer}/{_slug(fit.source)}/{fit.predictor}"
        name += "" if fit.sign == "both" else f"/s_{fit.sign}"
        minimum = fit.minimum_effective
        tags[f"minimum_effective.{name.replace('/', '.')}"] = minimum.status
        slope = fit.mixed_model if fit.mixed_model.evaluable else None
        for kind, interval in (("slope", slope), ("minimum_effective", minimum.level)):
            if interval is not None:
                metrics[f"{kind}/{name}"] = interval.estimate
                metrics[f"{kind}/{name}/low"] = interval.low
                metrics[f"{kind}/{name}/high"] = interval.high
    return metrics, tags


def figures(curve: pd.DataFrame, record: CalibrationRecord) -> dict[str, Figure]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, Figure] = {}
    config = record.config
    main = next((p for p in config.calibration.predictors if p in curve.columns), None)
    sources = sorted(curve["source"].unique())
    if main is not None:
        fig, axes = plt.subplots(1, len(sources), figsize=(5 * len(sources), 4), squeeze=False)
        for ax, source in zip(axes[0], sources, strict=True):
            part = curve[curve["source"] == source]
            for concept, group in part.groupby("concept"):
                g = group.groupby("n_train")[[main, "effect_above_null"]].mean().dropna()
                ax.plot(g[main], g["effect_above_null"], marker="o", alpha=0.7, label=concept)
            ax.axhline(config.calibration.effect_threshold, color="grey", linestyle=":")
            ax.axhline(0, color="black", linewidth=0.5)
            ax.set(
                xlabel=PREDICTOR_LABELS.get(main, main),
                ylabel="effect above null (gated)",
                title=f"{source}: per-concept trajectories",
            )
        axes[0][-1].legend(fontsize=6)
        fig.tight_layout()
        out["predictor_vs_effect.png"] = fig

    fig, ax = plt.subplots(figsize=(6, 4))
    for source in sources:
        g = curve[curve["source"] == source].groupby("n_train")["effect_above_null"]
        means, sems = g.mean(), g.sem()
        ax.errorbar(
            means.index, means.values, yerr=1.96 * sems.fillna(0).values, marker="o", label=source
        )
    ax.set_xscale("log")
    ax.axhline(config.calibration.effect_threshold, color="grey", linestyle=":")
    ax.set(
        xlabel="training texts per probe (P+N+U)",
        ylabel="effect above null (gated)",
        title="Steering effect along the training curve",
    )
    ax.legend()
    fig.tight_layout()
    out["effect_vs_training_size.png"] = fig

    shown = [(r, ends) for r in record.results if (ends := r.mixed_model.ends()) is not None]
    if shown:
        fig, ax = plt.subplots(figsize=(7, 0.5 + 0.35 * len(shown)))
        labels = [f"{r.source} · {r.predictor} · {r.sign} (L{r.layer})" for r, _ in shown]
        slopes = [s for _, (s, _, _) in shown]
        err = [[s - lo for _, (s, lo, _) in shown], [hi - s for _, (s, _, hi) in shown]]
        ax.errorbar(slopes, range(len(shown)), xerr=err, fmt="o")
        ax.axvline(0, color="black", linewidth=0.5)
        ax.set_yticks(range(len(shown)), labels, fontsize=7)
        ax.set(xlabel="mixed-model slope of effect on predictor (95% CI)", title="Predictors")
        fig.tight_layout()
        out["predictor_comparison.png"] = fig
    return out


def summary_markdown(record: CalibrationRecord, curve: pd.DataFrame) -> str:
    lines = [
        f"# Phase 6 calibration study {record.run_id}",
        "",
        f"{curve['tag'].nunique()} probe sets × {curve['concept'].nunique()} concepts; "
        f"effective: effect above null with its interval above {record.threshold}.",
        "",
        "Sign: `both` averages the effect over s = +1 and s = −1; `pos` and `neg` are each "
        "sign alone.",
        "",
        "| sign | layer | source | predictor | mixed-model slope [95% CI] "
        "| minimum effective level |",
        "|---|---|---|---|---|---|",
    ]
    for r in record.results:
        mm, minimum = r.mixed_model, r.minimum_effective
        slope = estimate_text(mm.estimate, mm.low, mm.high, reason=mm.reason)
        least = minimum.level
        level = (
            estimate_text(least.estimate, least.low, least.high, ".3f") + f" at {minimum.size}"
            if least is not None
            else "not reached"
        )
        lines.append(f"| {r.sign} | {r.layer} | {r.source} | {r.predictor} | {slope} | {level} |")
    lines += ["", "## Curve (means over concepts and seeds)", ""]
    wanted = (
        "f1_calibrated",
        "auroc",
        "ap",
        "effect_above_null",
        "effect_above_null_pos",
        "effect_above_null_neg",
    )
    cols = [c for c in wanted if c in curve.columns]
    table = curve.groupby(["layer", "source", "size", "n_train"])[cols].mean().reset_index()
    table = table.sort_values(["layer", "source", "n_train"])
    lines.append("| layer | source | size | " + " | ".join(cols) + " |")
    lines.append("|---|---|---|" + "---|" * len(cols))
    for layer, source, size, _n_train, *means in table.itertuples(index=False):
        cells = " | ".join(number(m, ".3f") for m in means)
        lines.append(f"| {layer} | {source} | {size} | {cells} |")
    return "\n".join(lines) + "\n"


def views(record: CalibrationRecord, curve: pd.DataFrame) -> Views:
    """What Phase 6 shows of its record."""
    drawn = figures(curve, record)
    metrics, tags = analysis_metrics(record)
    return Views(
        answer=answer_of(record),
        summary=summary_markdown(record, curve),
        files={RunDir.CURVE: curve.to_csv(index=False)},
        figures=drawn,
        metrics=metrics,
        tags=tags,
        tables={"curve.json": curve.replace({np.nan: None})},
        artefacts=(RunDir.CURVE, RunDir.CONFIG, RunDir.GENERATIONS, RunDir.SCORES),
        experiment=record.experiment,
    )


def children(record: CalibrationRecord, curve: pd.DataFrame) -> list[ChildRun]:
    """One child run per probe set: its settings, per-concept metrics and concepts."""
    out = []
    columns = (*record.config.calibration.predictors, "beta", "effect_above_null")
    for tag, group in curve.groupby("tag", sort=True):
        size, source, seed, layer = group[["size", "source", "seed", "layer"]].iloc[0]
        present = [c for c in columns if c in group.columns]
        metrics: dict[str, float | None] = {
            f"{column}/{concept}": float(value)
            for concept, *values in group[["concept", *present]].itertuples(index=False)
            for column, value in zip(present, values, strict=True)
            if value is not None and not (isinstance(value, float) and np.isnan(value))
        }
        out.append(
            ChildRun(
                key_tag="probe_set",
                name=f"{size} {source} seed {seed} L{layer}",
                tags={"phase": "6", "probe_set": str(tag), "generations": f"vectors == {tag}"},
                params={
                    "size": size,
                    "source": source,
                    "probe_seed": int(seed),
                    "layer": int(layer),
                },
                metrics=metrics,
                texts={"concepts.json": json.dumps(sorted(group["concept"]), indent=1)},
            )
        )
    return out
