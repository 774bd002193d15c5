"""The strength sweep's views: one run per sweep, in the ``strength-sweeps`` experiment.

A sweep decides the β that later runs of the model take, so it is published like every
study (``kernel/publisher.publish``, from the sweep's :class:`Views`): its settings as
params (logged when the run opens: :func:`sweep_params`), the range it found as metrics,
tags and the description, every β's measures as a table and as metrics at MLflow steps
(step = the β's place in the grid), a figure, the texts themselves as a table (what the
incoherent ones look like), and the record (``strength_range.json``) in the run folder
and as an artefact.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from experiments.answer import Answer
from experiments.config import Phase5Config
from experiments.kernel.publisher import Views
from experiments.strength_range import RANGE_FILE, StrengthLimits, StrengthRange, thin_note

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STRENGTH_EXPERIMENT = "strength-sweeps"
PHASE = "strength"
FIGURE = "strength_sweep.png"  # in the run folder, and the artefact plots/strength_sweep.png
QUESTION = "Up to which strength β do this model's steered texts still read as text?"
MEASURES = {  # a step's measure: its axis label
    "perplexity_multiple": "median perplexity, × the unsteered texts'",
    "near_empty": "share of near-empty texts (< 3 words)",
    "distinct_2": "distinct word bigrams per text",
}


def run_name(model_id: str, layer: int, source: str) -> str:
    return f"strength {model_id} L{layer} {source}"


def sweep_params(
    model_id: str,
    layer: int,
    config: Phase5Config,
    grid: Sequence[float],
    concepts: Sequence[str],
    limits: StrengthLimits,
) -> dict[str, object]:
    """What is swept and how a β is judged: the run's params (the record's fields of the
    same names)."""
    return {
        "model_id": model_id,
        "layer": layer,
        "mode": config.steering.mode,
        "vector_source": config.steering.vector_source,
        "grid": sorted(grid),
        "concepts": list(concepts),
        "prompts": len(config.generation.prompts),
        "max_new_tokens": config.generation.max_new_tokens,
        "seed": config.seed,
        **{f"limits.{k}": v for k, v in limits.model_dump().items()},
    }


def steps_frame(record: StrengthRange) -> pd.DataFrame:
    """One row per β × sign × arm with its measures and verdict (the CLI's table)."""
    return pd.DataFrame(
        [{**s.model_dump(exclude={"why"}), "why": "; ".join(s.why)} for s in record.steps]
    )


def _metric_name(arm: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "", arm)


def per_beta_metrics(record: StrengthRange) -> list[tuple[int, dict[str, float | None]]]:
    """(step = the β's place in the grid, metrics): β itself and each measure per arm and
    sign, so MLflow's charts draw the sweep."""
    out = []
    for place, beta in enumerate(record.grid):
        metrics: dict[str, float | None] = {"beta": beta}
        for s in record.steps:
            if s.beta != beta:
                continue
            suffix = f"{_metric_name(s.arm)}.{'pos' if s.sign > 0 else 'neg'}"
            for field in MEASURES:
                metrics[f"{field}.{suffix}"] = getattr(s, field)
            metrics[f"coherent.{suffix}"] = float(s.coherent)
        out.append((place, metrics))
    return out


def sweep_figure(record: StrengthRange) -> Figure:
    """The three measures against β (log scale), one line per arm and sign, the limits
    dashed and the coherent range shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = steps_frame(record)
    limits = record.limits
    lines = {
        "perplexity_multiple": limits.perplexity_multiple,
        "near_empty": record.unsteered.near_empty + limits.near_empty_excess,
        "distinct_2": record.unsteered.distinct_2 * limits.distinct_2_ratio,
    }
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (field, label) in zip(axes, MEASURES.items(), strict=True):
        for (arm, sign), group in steps.groupby(["arm", "sign"]):
            ax.plot(
                group["beta"],
                group[field],
                marker="o",
                linestyle="-" if arm == "concept" else ":",
                label=f"{arm}, s = {sign:+d}",
            )
        if lines[field] is not None:
            ax.axhline(lines[field], color="red", linestyle="--", linewidth=1, label="limit")
        if record.low is not None and record.high is not None:
            if record.low < record.high:
                ax.axvspan(record.low, record.high, color="green", alpha=0.1, label="coherent")
            else:  # one coherent β: a span of no width would not show
                ax.axvline(record.low, color="green", alpha=0.4, linewidth=6, label="coherent")
        ax.set_xscale("log")
        if field == "perplexity_multiple":
            ax.set_yscale("log")
        ax.set(xlabel="β", ylabel=label)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{record.model_id}, layer {record.layer}: {record.describe()}")
    fig.tight_layout()
    return fig


def sweep_note(record: StrengthRange, path: Path) -> str:
    """The run's description: the range, what a run takes from it, and where it is kept."""
    if record.beta is None:
        found = "No β of the grid was coherent: try smaller ones (`--grid`)."
    else:
        found = (
            f"Coherent β **{record.low:g} to {record.high:g}**: a run of this model at this "
            f"layer takes β {record.beta:g} for `steering.beta: auto` or a config β outside "
            "the range (docs/own-model.md)."
        )
    return (
        f"# Strength sweep: {record.model_id}, layer {record.layer} "
        f"({record.mode}, {record.vector_source} directions)\n\n{found}\n\n"
        f"Grid {record.grid}; {len(record.concepts)} concepts × {record.prompts} prompts, "
        f"{record.max_new_tokens} new tokens; α {record.alpha:.4g}. The range kept with the "
        f"classifiers: `{path}` (the record, also the run folder's and the artefact "
        f"`{RANGE_FILE}`); every text: the table `texts.json`.\n"
        + (f"\n**Warning**: {thin_note(record)}.\n" if record.warnings else "")
    )


def answer_of(record: StrengthRange) -> Answer:
    """The sweep's answer: the range in a sentence (a sweep measures no interval, so it
    has notes, not verdicts)."""
    if record.beta is None:
        found = f"{record.describe()}: try smaller βs (--grid)"
    else:
        found = (
            f"{record.describe()}: a run of {record.model_id} at layer {record.layer} takes "
            f"β {record.beta:g} for steering.beta auto or a config β outside the range"
        )
    notes = [found, *([f"Warning: {thin_note(record)}"] if record.warnings else [])]
    return Answer(PHASE, record.run_id or "", QUESTION, 0.95, notes=notes, figures=(FIGURE,))


def views(record: StrengthRange, texts: Sequence[dict[str, object]], path: Path) -> Views:
    """What a finished sweep shows (see the module docstring); ``path``: where its range
    is kept with the classifiers."""
    return Views(
        answer=answer_of(record),
        summary=sweep_note(record, path),
        figures={FIGURE: sweep_figure(record)},
        metrics={
            "strength.low": record.low,
            "strength.high": record.high,
            "strength.beta": record.beta,
            "alpha": record.alpha,
            "seconds": record.seconds,
        },
        steps=per_beta_metrics(record),
        tags={"strength.range": record.describe(), "steer_eval.range_file": str(path)},
        tables={"steps.json": steps_frame(record), "texts.json": pd.DataFrame(list(texts))},
    )
