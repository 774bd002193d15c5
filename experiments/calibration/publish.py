"""Phase 6 outputs: the curve table, the analysis, figures and MLflow runs.

The parent run holds the curve (an MLflow table), every slope and minimum-effective
level as metrics with a status tag each, and the figures; one child run per probe set
(training size × source × seed × layer) holds its per-concept metrics and points at
the generations it produced (``vectors`` tag in the parent's ``generations.jsonl``).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from experiments import tracking
from experiments.config import ExperimentConfig
from experiments.rundir import RunDir

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


def analysis_metrics(analysis: dict) -> tuple[dict[str, float | None], dict[str, str]]:
    metrics: dict[str, float | None] = {}
    tags: dict[str, str] = {}
    for result in analysis["results"]:
        sign = result.get("sign", "both")
        name = f"L{result['layer']}/{_slug(result['source'])}/{result['predictor']}"
        name += "" if sign == "both" else f"/s_{sign}"
        mm = result["mixed_model"]
        if mm.get("evaluable"):
            metrics[f"slope/{name}"] = mm["slope"]
            metrics[f"slope/{name}/low"] = mm["low"]
            metrics[f"slope/{name}/high"] = mm["high"]
        minimum = result["minimum_effective"]
        tags[f"minimum_effective.{name.replace('/', '.')}"] = minimum["status"]
        if minimum["status"] == "reached":
            metrics[f"minimum_effective/{name}"] = minimum["level"]
            metrics[f"minimum_effective/{name}/low"] = minimum["low"]
            metrics[f"minimum_effective/{name}/high"] = minimum["high"]
    return metrics, tags


def figures(curve: pd.DataFrame, analysis: dict, config: ExperimentConfig) -> dict[str, object]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
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

    rows = [r for r in analysis["results"] if r["mixed_model"].get("evaluable")]
    if rows:
        fig, ax = plt.subplots(figsize=(7, 0.5 + 0.35 * len(rows)))
        labels = [
            f"{r['source']} · {r['predictor']} · {r.get('sign', 'both')} (L{r['layer']})"
            for r in rows
        ]
        slopes = [r["mixed_model"]["slope"] for r in rows]
        err = [
            [s - r["mixed_model"]["low"] for s, r in zip(slopes, rows, strict=True)],
            [r["mixed_model"]["high"] - s for s, r in zip(slopes, rows, strict=True)],
        ]
        ax.errorbar(slopes, range(len(rows)), xerr=err, fmt="o")
        ax.axvline(0, color="black", linewidth=0.5)
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.set(xlabel="mixed-model slope of effect on predictor (95% CI)", title="Predictors")
        fig.tight_layout()
        out["predictor_comparison.png"] = fig
    return out


SIGN_WORDS = {"both": "both signs", "pos": "s > 0", "neg": "s < 0"}


def study_answer(run_id: str, analysis: dict, config: ExperimentConfig) -> dict:
    """Phase 6's answer block: the question and, per sign and direction source, the main
    predictor's mixed-model slope with its interval and the minimum effective level
    (``--json``, ``answer.md``, the top of the run description and the terminal)."""
    main = next(
        (
            p
            for p in config.calibration.predictors
            if any(r["predictor"] == p for r in analysis["results"])
        ),
        None,
    )
    headlines = []
    for r in analysis["results"]:
        if r["predictor"] != main:
            continue
        mm, minimum = r["mixed_model"], r["minimum_effective"]
        if mm.get("evaluable"):
            status = "yes" if mm["low"] > 0 else "no" if mm["high"] < 0 else "undecided"
            slope = f"slope {mm['slope']:+.3f} [{mm['low']:+.3f}, {mm['high']:+.3f}]: **{status}**"
        else:
            status, slope = "not evaluable", f"slope not evaluable ({mm.get('reason')})"
        level = (
            f"minimum effective {main} {minimum['level']:.3f} at {minimum['size']}"
            if minimum["status"] == "reached"
            else f"no training size reached an effect above {analysis['threshold']}"
        )
        headlines.append(
            {
                "sign": r.get("sign", "both"),
                "layer": r["layer"],
                "source": r["source"],
                "predictor": main,
                "status": status,
                "slope": mm.get("slope"),
                "low": mm.get("low"),
                "high": mm.get("high"),
                "minimum_effective": minimum,
                "text": f"{slope}; {level}",
            }
        )
    return {
        "run_id": run_id,
        "question": (
            f"Along a training curve, does a probe's detection quality ({main}) predict how "
            "strongly its direction steers beyond random directions (the effect above null), "
            "and from which quality on is steering effective? Mixed model with a random "
            "intercept per concept; yes when the slope's interval lies above 0."
        ),
        "headlines": headlines,
    }


def note_latest_study(run_id: str, answer: dict, config: ExperimentConfig) -> None:
    """The experiment's description leads with this study's verdicts (a first line short
    enough for the collapsed description, linked to the run's answer), then the slopes."""
    run = tracking.get_run(run_id)
    link = tracking.ui_path(run.info.experiment_id, run_id, artifact=RunDir.ANSWER)
    heads = answer["headlines"]
    predictor = heads[0]["predictor"] if heads else "the predictor"
    by_source: dict[str, list[str]] = {}
    for h in heads:
        sign = {"both": "both"}.get(h["sign"], SIGN_WORDS.get(h["sign"], h["sign"]))
        by_source.setdefault(h["source"], []).append(f"{sign} **{h['status']}**")
    short = "; ".join(f"{source}: {', '.join(parts)}" for source, parts in by_source.items())
    detail = "; ".join(
        f"{SIGN_WORDS.get(h['sign'], h['sign'])}, {h['source']}: {h['text']}" for h in heads
    )
    text = (
        f"**Latest answer** ([open]({link})): {predictor} → effect? {short}."
        f"\n\nPhase 6 run {run.info.run_name or run_id}: {detail}."
    )
    tracking.set_experiment_note(config.calibration.experiment, text)


def study_answer_markdown(answer: dict) -> str:
    lines = [
        f"## The answer (Phase 6 run `{answer['run_id']}`)",
        "",
        f"**Question.** {answer['question']}",
        "",
    ]
    for h in answer["headlines"]:
        lines.append(
            f"- **{SIGN_WORDS.get(h['sign'], h['sign'])}, {h['source']} (L{h['layer']}):** "
            f"{h['text']}"
        )
    lines += ["", "Figures: `predictor_vs_effect.png` (per-concept trajectories), "]
    lines[-1] += "`effect_vs_training_size.png`, `predictor_comparison.png`."
    return "\n".join(lines) + "\n\n---\n"


def summary_markdown(run_id: str, curve: pd.DataFrame, analysis: dict) -> str:
    def fmt(v: object) -> str:
        return "n/a" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.3f}"

    lines = [
        f"# Phase 6 calibration study {run_id}",
        "",
        f"{curve['tag'].nunique()} probe sets × {curve['concept'].nunique()} concepts; "
        f"effective: effect above null with its interval above {analysis['threshold']}.",
        "",
        "Sign: `both` averages the effect over s = +1 and s = −1; `pos` and `neg` are each "
        "sign alone.",
        "",
        "| sign | layer | source | predictor | mixed-model slope [95% CI] "
        "| minimum effective level |",
        "|---|---|---|---|---|---|",
    ]
    for r in analysis["results"]:
        mm, minimum = r["mixed_model"], r["minimum_effective"]
        slope = (
            f"{fmt(mm['slope'])} [{fmt(mm['low'])}, {fmt(mm['high'])}]"
            if mm.get("evaluable")
            else f"n/a ({mm.get('reason')})"
        )
        level = (
            f"{fmt(minimum['level'])} [{fmt(minimum['low'])}, {fmt(minimum['high'])}] "
            f"at {minimum['size']}"
            if minimum["status"] == "reached"
            else "not reached"
        )
        lines.append(
            f"| {r.get('sign', 'both')} | {r['layer']} | {r['source']} | {r['predictor']} "
            f"| {slope} | {level} |"
        )
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
    for _, row in table.iterrows():
        lines.append(
            f"| {row['layer']} | {row['source']} | {row['size']} | "
            + " | ".join(fmt(row[c]) for c in cols)
            + " |"
        )
    return "\n".join(lines) + "\n"


def publish_study(
    run_id: str,
    run_dir: RunDir,
    config: ExperimentConfig,
    curve: pd.DataFrame,
    analysis: dict,
    timings: dict[str, float],
) -> None:
    import matplotlib.pyplot as plt

    c = tracking.client()
    from experiments.rundir import atomic_write_text

    atomic_write_text(run_dir.file(RunDir.CURVE), curve.to_csv(index=False))
    run_dir.write_json(RunDir.ANALYSIS, analysis)
    summary = summary_markdown(run_id, curve, analysis)
    atomic_write_text(run_dir.file(RunDir.SUMMARY), summary)
    answer = study_answer_markdown(study_answer(run_id, analysis, config))
    atomic_write_text(run_dir.file(RunDir.ANSWER), answer)
    tracking.overwrite_table(run_id, curve.replace({np.nan: None}), "curve.json")
    metrics, tags = analysis_metrics(analysis)
    tracking.log_metrics(run_id, metrics)
    tracking.log_metrics(run_id, {f"time/{k}": v for k, v in timings.items()})
    for key, value in tags.items():
        c.set_tag(run_id, key, value)
    tracking.set_note(run_id, answer + "\n" + summary)  # the answer first
    note_latest_study(run_id, study_answer(run_id, analysis, config), config)
    for name, fig in figures(curve, analysis, config).items():
        fig.savefig(run_dir.file(name), dpi=110)
        c.log_figure(run_id, fig, f"plots/{name}")
        plt.close(fig)
    for name in (
        RunDir.ANSWER,
        RunDir.CURVE,
        RunDir.ANALYSIS,
        RunDir.SUMMARY,
        RunDir.CONFIG,
        RunDir.GENERATIONS,
        RunDir.SCORES,
    ):
        if run_dir.file(name).exists():
            c.log_artifact(run_id, str(run_dir.file(name)))
    existing = {
        r.data.tags.get("probe_set")
        for r in tracking.child_runs(run_id, config.calibration.experiment)
    }
    for tag, group in curve.groupby("tag", sort=True):
        if tag in existing:
            continue
        first = group.iloc[0]
        with tracking.tracked_run(
            config.calibration.experiment,
            f"{first['size']} {first['source']} seed {first['seed']} L{first['layer']}",
            parent_run_id=run_id,
            tags={"phase": "6", "probe_set": str(tag), "generations": f"vectors == {tag}"},
        ) as child:
            tracking.log_params(
                child,
                {
                    "size": first["size"],
                    "source": first["source"],
                    "probe_seed": int(first["seed"]),
                    "layer": int(first["layer"]),
                },
            )
            child_metrics: dict[str, float | None] = {}
            for _, row in group.iterrows():
                for column in (*config.calibration.predictors, "beta", "effect_above_null"):
                    value = row.get(column)
                    if value is not None and not (isinstance(value, float) and np.isnan(value)):
                        child_metrics[f"{column}/{row['concept']}"] = float(value)
            tracking.log_metrics(child, child_metrics)
            c.log_text(child, json.dumps(sorted(group["concept"]), indent=1), "concepts.json")
