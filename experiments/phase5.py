"""Phase 5 Part A: steer with each concept's classifier direction and score the text.

One parent MLflow run per invocation and one child run per concept × strength.
Every generation is appended to ``results/phase5/<run id>/generations.jsonl`` as soon
as its batch finishes, so ``steer-eval run --resume <run id>`` finishes an interrupted
run without redoing or losing anything (row seeds do not depend on batching).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import tracking
from experiments.analysis import (
    add_paired_shifts,
    cell_metrics,
    concept_magnitudes,
    criteria_metrics,
    evaluate_criteria,
    per_strength,
    strength_label,
)
from experiments.concepts import Concept, ConceptGraph, load_concepts
from experiments.config import ExperimentConfig, dump_config, load_config
from experiments.phase4 import ensure_classifiers
from experiments.prompts import centroid_texts, probe_eval_set, render_generation_prompts
from metrics.semantic import Centroids, build_centroids, score, steering_label
from metrics.text import coherence_report, count_terms
from steering.activations import residual_scale
from steering.generation import (
    BatchStats,
    GenerationRow,
    SamplingConfig,
    continuation_nll,
    generate_batch,
)
from steering.models import LoadedModel, load_model
from steering.vector import SteeringVector

log = logging.getLogger(__name__)
GENERATIONS_FILE = "generations.jsonl"
RESULTS_FILE = "steering_results.json"


class RunError(RuntimeError):
    """A Phase 5 run cannot start or resume; the message says why and what to do."""


@dataclass
class Timer:
    """Wall time per stage, reported in the results and by ``make bench``."""

    stages: dict[str, float] = field(default_factory=dict)

    def time(self, name: str) -> _Stage:
        return _Stage(self, name)


class _Stage:
    def __init__(self, timer: Timer, name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.stages[self.name] = self.timer.stages.get(self.name, 0.0) + (
            time.perf_counter() - self.start
        )


@dataclass
class Phase5Result:
    run_id: str
    results_dir: Path
    records: pd.DataFrame
    criteria: dict
    per_strength: dict
    timings: dict[str, float]
    tokens_per_second: float


def row_seed(seed: int, synset: str, prompt_index: int, sample: int) -> int:
    """The same seed for every strength of a (concept, prompt, sample): common random numbers."""
    digest = hashlib.sha256(f"{seed}|{synset}|{prompt_index}|{sample}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def row_key(synset: str, prompt_index: int, sample: int, strength: float) -> str:
    return f"{synset}|p{prompt_index}|n{sample}|s{strength:+.3f}"


@dataclass
class Plan:
    """Everything a run needs besides the model: rows, vectors, centroids."""

    config: ExperimentConfig
    graph: ConceptGraph
    layer: int
    vectors: dict[str, SteeringVector]
    centroids: dict[str, Centroids]
    f1: dict[str, float]
    alpha: float
    rows: list[GenerationRow]
    row_meta: dict[str, dict]


def _neutral_texts(graph: ConceptGraph, seed: int) -> list[str]:
    texts: set[str] = set()
    for concept in graph.concepts:
        texts.update(
            e.text for e in probe_eval_set(concept, graph, seed=seed) if e.kind == "neutral"
        )
    return sorted(texts)


def build_plan(
    config: ExperimentConfig, lm: LoadedModel, graph: ConceptGraph, embedder, timer: Timer
) -> Plan:
    from metrics.embedder import embed

    layer = lm.check_layer(config.layer if config.layer is not None else lm.default_layer)
    with timer.time("classifiers"):
        classifiers = ensure_classifiers(config, lm, graph, layer)
    with timer.time("vectors"):
        alpha = residual_scale(lm, _neutral_texts(graph, config.seed), layer)
        vectors = {}
        for concept in graph.concepts:
            probe = classifiers.probes[concept.synset]
            probe.check_compatible(lm.model_id, layer)
            if config.steering.vector_source == "classifier":
                direction = probe.direction()
            else:
                if probe.diffmean is None:
                    raise RunError(
                        f"the classifier for {concept.synset} has no diffmean vector; "
                        "retrain it with `make classifiers`"
                    )
                direction = probe.diffmean
            import torch

            vectors[concept.synset] = SteeringVector.from_direction(
                torch.as_tensor(direction),
                layer,
                alpha=alpha,
                beta=config.steering.beta,
                mode=config.steering.mode,
                source=config.steering.vector_source,
            )
    with timer.time("centroids"):
        texts = {
            c.synset: centroid_texts(c, n=config.centroids.texts_per_centroid, seed=config.seed)
            for c in graph.concepts
        }
        flat = [
            t
            for sets in texts.values()
            for name in ("core", "boundary", "negative")
            for t in sets[name]
        ]
        emb = embed(embedder, flat)
        centroids, i = {}, 0
        for synset, sets in texts.items():
            by_set = {}
            for name in ("core", "boundary", "negative"):
                by_set[name] = emb[i : i + len(sets[name])]
                i += len(sets[name])
            centroids[synset] = build_centroids(by_set, sets)

    rows, meta = [], {}
    index = {c.synset: k for k, c in enumerate(graph.concepts)}
    for concept in graph.concepts:
        prompts = render_generation_prompts(concept, config.generation.prompts)
        vector = vectors[concept.synset]
        for p_idx, prompt in enumerate(prompts):
            for sample in range(config.generation.samples_per_prompt):
                seed = row_seed(config.seed, concept.synset, p_idx, sample)
                for strength in config.steering.strengths:
                    key = row_key(concept.synset, p_idx, sample, strength)
                    rows.append(
                        GenerationRow(
                            key,
                            prompt,
                            seed,
                            index[concept.synset],
                            float(vector.coefficients(strength)[0]),
                        )
                    )
                    meta[key] = {
                        "concept": concept.synset,
                        "concept_name": concept.name,
                        "prompt_index": p_idx,
                        "prompt": prompt,
                        "sample": sample,
                        "strength": float(strength),
                        "seed": seed,
                    }
    return Plan(config, graph, layer, vectors, centroids, classifiers.f1(), alpha, rows, meta)


def score_generations(plan: Plan, gens, nll: list[float | None], embedder) -> list[dict]:
    """Δ, the three similarities, term counts and coherence for each generation."""
    from metrics.embedder import embed

    emb = embed(embedder, [g.text if g.text.strip() else " " for g in gens])
    records = []
    for g, e, loss in zip(gens, emb, nll, strict=True):
        meta = plan.row_meta[g.key]
        concept: Concept = plan.graph.get(meta["concept"])
        sims = score(e[None, :], plan.centroids[concept.synset])
        delta = float(sims.delta[0])
        coherence = coherence_report(g.text, g.prompt)
        records.append(
            {
                "key": g.key,
                **meta,
                "text": g.text,
                "n_prompt_tokens": g.n_prompt_tokens,
                "n_new_tokens": g.n_new_tokens,
                "stopped_at_eos": g.stopped_at_eos,
                "core_sim": float(sims.core_sim[0]),
                "boundary_sim": float(sims.boundary_sim[0]),
                "neg_sim": float(sims.neg_sim[0]),
                "delta": delta,
                "label": steering_label(delta, plan.config.metrics.delta_threshold),
                "concept_term_count": count_terms(g.text, concept.lemmas),
                "related_term_count": count_terms(g.text, concept.related_terms),
                "nll": loss,
                "perplexity": math.exp(loss) if loss is not None else None,
                "near_empty": coherence.near_empty,
                "repeated_trigram_fraction": coherence.repeated_trigram_fraction,
                "distinct_2": coherence.distinct_2,
                "echo_fraction": coherence.echo_fraction,
                "is_echo": coherence.echo_fraction >= plan.config.metrics.echo_threshold,
            }
        )
    return records


def parse_jsonl(text: str) -> list[dict]:
    """Records in a JSONL text; a torn last line from a crash is dropped, not fatal."""
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("dropping a torn line in a generations file (an interrupted write)")
    return records


def _read_jsonl(path: Path) -> list[dict]:
    return parse_jsonl(path.read_text()) if path.exists() else []


def _append_jsonl(path: Path, records: list[dict]) -> None:
    with path.open("a") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _batches(rows: list[GenerationRow], lm: LoadedModel, size: int) -> list[list[GenerationRow]]:
    """Rows sorted by prompt length so each batch carries little padding."""
    lengths = {r.prompt: len(lm.tokenizer(r.prompt)["input_ids"]) for r in rows}
    ordered = sorted(rows, key=lambda r: (lengths[r.prompt], r.key))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def generate_all(
    plan: Plan,
    lm: LoadedModel,
    embedder,
    out: Path,
    timer: Timer,
    on_batch: Callable[[int, int], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> BatchStats:
    """Generate and score every row not yet in ``generations.jsonl``; append as we go."""
    import torch

    path = out / GENERATIONS_FILE
    done = {r["key"] for r in _read_jsonl(path)}
    pending = [r for r in plan.rows if r.key not in done]
    directions = torch.stack([plan.vectors[c.synset].direction for c in plan.graph.concepts])
    g = plan.config.generation
    sampling = SamplingConfig(g.max_new_tokens, g.temperature, g.top_p, g.greedy)
    mode = plan.config.steering.mode
    totals = BatchStats()
    finished = len(done)
    for batch in _batches(pending, lm, g.batch_size):
        with timer.time("generation"):
            gens, stats = generate_batch(
                lm, batch, directions, plan.layer, mode, sampling, on_step=on_step
            )
        totals.add(stats)
        # Perplexity under the unsteered model: strength-0 rows already have it.
        nll: list[float | None] = [None] * len(gens)
        steered = [i for i, r in enumerate(batch) if r.coefficient != 0.0 and gens[i].token_ids]
        for i, r in enumerate(batch):
            if r.coefficient == 0.0 and gens[i].logprobs:
                nll[i] = -float(np.mean(gens[i].logprobs))
        if steered:
            with timer.time("perplexity"):
                losses = continuation_nll(
                    lm, [gens[i].prompt for i in steered], [gens[i].token_ids for i in steered]
                )
            for i, loss in zip(steered, losses, strict=True):
                nll[i] = loss
        with timer.time("embedding"):
            records = score_generations(plan, gens, nll, embedder)
        for rec in records:
            rec["batch_tokens_per_second"] = stats.tokens_per_second
        _append_jsonl(path, records)
        finished += len(batch)
        if on_batch:
            on_batch(finished, len(plan.rows))
    return totals


# --------------------------------------------------------------------------- logging


def _strength_metrics(agg: dict[float, dict]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for strength, values in agg.items():
        label = strength_label(strength)
        for key in (
            "delta_mean",
            "delta_std",
            "magnitude_mean",
            "direction_accuracy",
            "concept_term_count_mean",
            "near_empty_fraction",
            "distinct_2_mean",
            "perplexity_median",
            "echo_fraction",
        ):
            out[f"{key}/s_{label}"] = values.get(key)
    return out


def _log_children(plan: Plan, records: pd.DataFrame, parent_id: str, model_id: str) -> int:
    """One child run per concept × strength; existing ones (from a resumed run) are kept."""
    experiment = plan.config.tracking.experiment
    existing = {r.data.tags.get("cell") for r in tracking.child_runs(parent_id, experiment)}
    c = tracking.client()
    logged = 0
    columns = [
        "prompt",
        "sample",
        "text",
        "delta",
        "core_sim",
        "boundary_sim",
        "neg_sim",
        "concept_term_count",
        "related_term_count",
        "perplexity",
        "shift",
        "label",
    ]
    for (synset, strength), cell in records.groupby(["concept", "strength"], sort=True):
        cell_key = f"{synset}|{strength:+.3f}"
        if cell_key in existing:
            continue
        name = plan.graph.get(synset).name
        run_id = tracking.start_run(
            experiment,
            f"{name} s={strength:+g}",
            parent_run_id=parent_id,
            tags={"cell": cell_key, "phase": "5"},
        )
        tracking.log_params(
            run_id,
            {
                "concept": synset,
                "strength": strength,
                "model": model_id,
                "layer": plan.layer,
                "mode": plan.config.steering.mode,
                "vector_source": plan.config.steering.vector_source,
                "beta": plan.config.steering.beta,
                "seed": plan.config.seed,
            },
        )
        metrics = cell_metrics(cell)
        metrics["classifier_f1"] = plan.f1.get(synset)
        tracking.log_metrics(run_id, metrics)
        c.log_table(run_id, cell[columns].reset_index(drop=True), "generations.json")
        tracking.end_run(run_id)
        logged += 1
    return logged


def _plots(records: pd.DataFrame, plan: Plan, magnitudes: dict[str, float]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    means = records.groupby(["concept", "strength"])["delta"].mean().unstack("strength")
    for synset, row in means.iterrows():
        ax.plot(row.index, row.values, marker="o", label=plan.graph.get(synset).name)
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
    shared = sorted(set(plan.f1) & set(magnitudes))
    xs, ys = [plan.f1[k] for k in shared], [magnitudes[k] for k in shared]
    ax.scatter(xs, ys)
    for k, x, y in zip(shared, xs, ys, strict=True):
        ax.annotate(plan.graph.get(k).name, (x, y), fontsize=7)
    ax.set(
        xlabel="classifier F1 (held out)",
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
    ax.axhline(plan.config.metrics.delta_threshold, color="green", linestyle=":")
    ax.axhline(-plan.config.metrics.delta_threshold, color="red", linestyle=":")
    ax.set(xlabel="steering strength s", ylabel="Δ", title="Δ distribution per strength")
    fig.tight_layout()
    figs["delta_distribution.png"] = fig
    return figs


def summary_markdown(
    run_id: str, plan: Plan, agg: dict, criteria: dict, tps: float, seconds: float
) -> str:
    lines = [
        f"# Phase 5 run {run_id}",
        "",
        f"- model: `{plan.config.model}`, layer {plan.layer}, mode {plan.config.steering.mode}, "
        f"vector {plan.config.steering.vector_source}, β={plan.config.steering.beta}, "
        f"α={plan.alpha:.1f}",
        f"- {len(plan.graph.concepts)} concepts × {len(plan.config.generation.prompts)} prompts × "
        f"{len(plan.config.steering.strengths)} strengths, "
        f"{plan.config.generation.max_new_tokens} new tokens, seed {plan.config.seed}",
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


def finalize(
    plan: Plan, run_id: str, out: Path, model_id: str, timer: Timer, totals: BatchStats
) -> Phase5Result:
    """Pair, aggregate, judge the criteria and log everything to the parent and children."""
    with timer.time("analysis"):
        records = pd.DataFrame(_read_jsonl(out / GENERATIONS_FILE))
        missing = {r.key for r in plan.rows} - set(records["key"])
        if missing:
            raise RunError(
                f"{len(missing)} generations are missing; resume with "
                f"`steer-eval run --resume {run_id}`"
            )
        records = add_paired_shifts(records)
        agg = per_strength(records)
        crit = evaluate_criteria(records, plan.f1, plan.config.criteria)
        magnitudes = concept_magnitudes(records)
    with timer.time("logging"):
        n_children = _log_children(plan, records, run_id, model_id)
        parent_metrics = _strength_metrics(agg)
        parent_metrics.update(criteria_metrics(crit.results))
        f1c = crit.f1_correlation
        if f1c.evaluable:
            parent_metrics.update(
                {
                    "f1_vs_magnitude/r": f1c.r,
                    "f1_vs_magnitude/p_value": f1c.p_value,
                    "f1_vs_magnitude/ci_low": f1c.ci_low,
                    "f1_vs_magnitude/ci_high": f1c.ci_high,
                }
            )
        parent_metrics["mean_classifier_f1"] = float(np.mean(list(plan.f1.values())))
        tps = totals.tokens_per_second
        if totals.seconds > 0:
            parent_metrics["generation/tokens_per_second"] = tps
            parent_metrics["generation/seconds"] = totals.seconds
        parent_metrics["n_generations"] = float(len(records))
        c = tracking.client()
        c.set_tag(run_id, "criteria", ", ".join(f"{k}={v.status}" for k, v in crit.results.items()))
        for key, value in crit.results.items():
            c.set_tag(run_id, f"criterion.{key}", value.status)
        results = {
            "run_id": run_id,
            "config": plan.config.model_dump(mode="json"),
            "model_id": model_id,
            "layer": plan.layer,
            "alpha": plan.alpha,
            "beta": plan.config.steering.beta,
            "classifier_f1": plan.f1,
            "per_strength": {str(k): v for k, v in agg.items()},
            "per_concept_magnitude": magnitudes,
            "criteria": {k: v.to_dict() for k, v in crit.results.items()},
            "f1_vs_magnitude": f1c.to_dict(),
            "timings": timer.stages,
            "tokens_per_second": tps,
            "generations": records.replace({np.nan: None}).to_dict(orient="records"),
        }
        (out / RESULTS_FILE).write_text(json.dumps(results, indent=1, default=str))
        summary = summary_markdown(run_id, plan, agg, crit.results, tps, sum(timer.stages.values()))
        (out / "summary.md").write_text(summary)
        crit.table().to_csv(out / "criteria.csv", index=False)
        import matplotlib.pyplot as plt

        for name, fig in _plots(records, plan, magnitudes).items():
            fig.savefig(out / name, dpi=110)
            c.log_figure(run_id, fig, f"plots/{name}")
            plt.close(fig)
        for name in (
            RESULTS_FILE,
            "summary.md",
            "criteria.csv",
            GENERATIONS_FILE,
            "config.yaml",
            "centroid_texts.json",
        ):
            c.log_artifact(run_id, str(out / name))
    timer.stages["logging"] = timer.stages.get("logging", 0.0)
    for stage, seconds in timer.stages.items():
        parent_metrics[f"time/{stage}"] = seconds
    tracking.log_metrics(run_id, {k: v for k, v in parent_metrics.items() if k.startswith("time/")})
    tracking.log_metrics(
        run_id, {k: v for k, v in parent_metrics.items() if not k.startswith("time/")}
    )
    tracking.end_run(run_id)
    log.info("logged %d child runs", n_children)
    return Phase5Result(run_id, out, records, crit.results, agg, dict(timer.stages), tps)


# --------------------------------------------------------------------------- entry point


def run_phase5(
    config: ExperimentConfig | None = None,
    resume: str | None = None,
    lm: LoadedModel | None = None,
    embedder=None,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> Phase5Result:
    """Run (or resume) the whole Part A grid and log it; returns the parent run's results."""
    say = progress or (lambda _msg: None)
    timer = Timer()
    if resume:
        tracking.get_run(resume)  # a clear error for an unknown id
        base = Path((config or load_config()).tracking.results_dir) / resume
        if not (base / "config.yaml").exists():
            raise RunError(
                f"run {resume} has no local results under {base}; it cannot be resumed "
                "from this machine"
            )
        config = load_config(base / "config.yaml")
    assert config is not None
    with timer.time("model_load"):
        if lm is None:
            say(f"loading model {config.model}")
            lm = load_model(config.model, device=config.device, dtype=config.dtype)
        if embedder is None:
            from metrics.embedder import load_embedder

            embedder = load_embedder(config.embedding.model)
    graph = load_concepts(
        config.concepts.file, limit=config.concepts.limit, synsets=config.concepts.synsets
    )
    say("preparing classifiers, steering vectors and centroids")
    plan = build_plan(config, lm, graph, embedder, timer)

    if resume:
        run_id = resume
        tracking.client().update_run(run_id, "RUNNING")
    else:
        run_id = tracking.start_run(
            config.tracking.experiment,
            f"{config.name} {config.steering.vector_source} {config.steering.mode} L{plan.layer}",
            tags={"phase": "5"},
        )
        tracking.log_params(
            run_id,
            {
                "model": lm.model_id,
                "layer": plan.layer,
                "mode": config.steering.mode,
                "vector_source": config.steering.vector_source,
                "strengths": config.steering.strengths,
                "seed": config.seed,
                "config_hash": config.config_hash(),
                "alpha": round(plan.alpha, 3),
                "beta": config.steering.beta,
                "n_concepts": len(graph.concepts),
                "max_new_tokens": config.generation.max_new_tokens,
                "greedy": config.generation.greedy,
                "embedding": config.embedding.model,
                "train": config.classifier.train,
            },
        )
        tracking.log_params(run_id, {f"config.{k}": v for k, v in config.flat().items()})
    out = Path(config.tracking.results_dir) / run_id
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(dump_config(config))
    (out / "centroid_texts.json").write_text(
        json.dumps({k: dict(v.texts) for k, v in plan.centroids.items()}, indent=1, default=list)
    )
    say(f"run {run_id}: generating {len(plan.rows)} rows into {out}")
    try:
        totals = generate_all(plan, lm, embedder, out, timer, on_batch=on_batch, on_step=on_step)
        say("scoring, pairing and logging")
        return finalize(plan, run_id, out, lm.model_id, timer, totals)
    except BaseException:
        tracking.end_run(run_id, "KILLED")
        raise


def load_results(run_id: str, results_dir: str = "results/phase5") -> dict:
    """A finished run's ``steering_results.json``: local copy, else the MLflow artefact."""
    local = Path(results_dir) / run_id / RESULTS_FILE
    if local.exists():
        return json.loads(local.read_text())
    tracking.get_run(run_id)
    import mlflow

    try:
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=RESULTS_FILE)
    except Exception as exc:
        raise RunError(
            f"run {run_id} has no {RESULTS_FILE}; is it a finished Phase 5 run?"
        ) from exc
    return json.loads(Path(path).read_text())
