"""Human-facing views of a run: the summary markdown and the figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from experiments.pipeline.context import RunContext


def plots(
    records: pd.DataFrame, ctx: RunContext, magnitudes: dict[str, float]
) -> dict[str, object]:
    """The run's figures by file name: Δ per strength and concept, F1 against magnitude,
    Δ distribution per strength."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    means = records.groupby(["concept", "strength"])["delta"].mean().unstack("strength")
    for synset, row in means.iterrows():
        ax.plot(row.index, row.values, marker="o", label=ctx.graph.get(synset).name)
    overall = records.groupby("strength")["delta"].mean()
    ax.plot(overall.index, overall.values, color="black", linewidth=3, label="mean")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set(
        xlabel="steering strength s",
        ylabel="mean Δ = cos(core) − cos(neg)",
        title="Δ against strength per concept",
    )
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    figs["delta_vs_strength.png"] = fig

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    predictor = ctx.predictor_values()
    shared = sorted(set(predictor) & set(magnitudes))
    xs, ys = [predictor[k] for k in shared], [magnitudes[k] for k in shared]
    ax.scatter(xs, ys)
    for k, x, y in zip(shared, xs, ys, strict=True):
        ax.annotate(ctx.graph.get(k).name, (x, y), fontsize=7)
    ax.set(
        xlabel=f"classifier {ctx.predictor_name} (held-out test split)",
        ylabel="mean |Δ_s − Δ_0|",
        title="F1 against steering magnitude",
    )
    fig.tight_layout()
    figs["f1_vs_magnitude.png"] = fig

    fig, ax = plt.subplots(figsize=(6, 4.5))
    strengths = sorted(records["strength"].unique())
    ax.violinplot(
        [records[records["strength"] == s]["delta"].to_numpy() for s in strengths],
        positions=range(len(strengths)),
        showmedians=True,
    )
    ax.set_xticks(range(len(strengths)), [f"{s:+g}" for s in strengths])
    ax.axhline(ctx.config.metrics.delta_threshold, color="green", linestyle=":")
    ax.axhline(-ctx.config.metrics.delta_threshold, color="red", linestyle=":")
    ax.set(xlabel="steering strength s", ylabel="Δ", title="Δ distribution per strength")
    fig.tight_layout()
    figs["delta_distribution.png"] = fig
    return figs


def summary_markdown(
    run_id: str, ctx: RunContext, agg: dict, criteria: dict, tps: float, seconds: float
) -> str:
    """The run at a glance: settings, per-strength table, criteria."""
    lines = [
        f"# Phase 5 run {run_id}",
        "",
        f"- model: `{ctx.config.model}`, layer {ctx.layer}, mode {ctx.config.steering.mode}, "
        f"vector {ctx.config.steering.vector_source}, β={ctx.config.steering.beta}, "
        f"α={ctx.alpha:.1f}",
        f"- {len(ctx.graph.concepts)} concepts × {len(ctx.config.generation.prompts)} prompts × "
        f"{len(ctx.config.steering.strengths)} strengths, "
        f"{ctx.config.generation.max_new_tokens} new tokens, seed {ctx.config.seed}",
        f"- generation: {tps:.1f} tokens/s; wall time {seconds:.1f} s",
        "",
        "| strength | mean Δ | mean magnitude | direction accuracy | near-empty | distinct-2 |",
        "|---|---|---|---|---|---|",
    ]

    def fmt(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    for strength, v in sorted(agg.items()):
        lines.append(
            f"| {strength:+g} | {fmt(v['delta_mean'])} | {fmt(v['magnitude_mean'])} | "
            f"{fmt(v['direction_accuracy'])} | {fmt(v['near_empty_fraction'])} | "
            f"{fmt(v['distinct_2_mean'])} |"
        )
    lines += ["", "| criterion | status | value | threshold | reason |", "|---|---|---|---|---|"]
    for c in criteria.values():
        lines.append(f"| {c.key} | **{c.status}** | {fmt(c.value)} | {c.threshold} | {c.reason} |")
    return "\n".join(lines) + "\n"
