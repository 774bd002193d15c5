"""Phase 6: train probes along a training curve and measure how each probe set steers.

For every (layer, training size, probe seed, direction source) the Phase 4 stage trains
or reuses a probe set, the vectors stage turns it into steering vectors, and the
Phase 5 stages generate with them: β chosen per concept on the selection prompts, then
the report prompts at that β. Everything lands in one run folder. Rows that do not
depend on the probe set (the unsteered twins and the random-direction null at each β)
have the same keys for every probe set, so they are generated once and shared; an
interrupted study resumes from its folder like ``steer-eval run --resume``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import tracking
from experiments.concepts import load_concepts
from experiments.config import ExperimentConfig
from experiments.pipeline.effect import above_null, paired_effects, select_betas
from experiments.pipeline.generate import generate
from experiments.pipeline.plan import CONCEPT_ARM, build_plan
from experiments.pipeline.probes import ProbeSet, ensure_classifiers
from experiments.pipeline.score import build_scorer, score_all
from experiments.pipeline.timer import Timer
from experiments.pipeline.vectors import build_vectors, neutral_texts
from experiments.rundir import RUN_DIR_TAG, RunDir

log = logging.getLogger(__name__)
PHASE = "6"
SELECTION_FILE = "selection.json"
PROBES_FILE = "probe_sets.json"


@dataclass(frozen=True)
class ProbeSetSpec:
    """One point of the curve: which probes, trained how, steering along which direction."""

    layer: int
    size: str
    seed: int
    source: str

    @property
    def tag(self) -> str:
        return f"L{self.layer}-{self.size}-s{self.seed}-{self.source}"


@dataclass
class CalibrationResult:
    run_id: str
    run_dir: Path
    curve: pd.DataFrame
    analysis: dict
    timings: dict[str, float] = field(default_factory=dict)


def specs(config: ExperimentConfig, layers: list[int]) -> list[ProbeSetSpec]:
    c = config.calibration
    return [
        ProbeSetSpec(layer, size, seed, source)
        for layer in layers
        for size in c.sizes
        for seed in c.probe_seeds
        for source in c.sources
    ]


def _probe_config(config: ExperimentConfig, spec: ProbeSetSpec) -> ExperimentConfig:
    """The Phase 4 config of one probe set: its size and seed (generation keeps its own)."""
    classifier = config.classifier.model_copy(update={"train": spec.size})
    return config.model_copy(update={"seed": spec.seed, "classifier": classifier})


def _source_config(config: ExperimentConfig, source: str) -> ExperimentConfig:
    steering = config.steering.model_copy(update={"vector_source": source})
    return config.model_copy(update={"steering": steering})


def probe_predictors(probes: ProbeSet, names: list[str]) -> dict[str, dict[str, float | None]]:
    """Per concept, the detection predictors the study compares (None when absent)."""
    out = {}
    for synset, probe in probes.probes.items():
        metrics = dict(probe.metrics)
        if "cos_probe_diffmean" not in metrics and probe.diffmean is not None:
            d = probe.direction()
            metrics["cos_probe_diffmean"] = float(
                d @ probe.diffmean / np.linalg.norm(probe.diffmean)
            )
        out[synset] = {
            name: (float(metrics[name]) if isinstance(metrics.get(name), int | float) else None)
            for name in names
        }
    return out


def effects_for(
    records: pd.DataFrame, tag: str, betas: dict[str, float], config: ExperimentConfig
) -> pd.DataFrame:
    """Per concept and sign, the gated effect above null of one probe set's report rows,
    against the random directions at the β this probe set chose for the concept."""
    report = records[records["split"] == "report"]
    vectors = report["vectors"] if "vectors" in report.columns else pd.Series(None, report.index)
    mine = (report["arm"] == CONCEPT_ARM) & ((report["strength"] == 0) | (vectors == tag))
    chosen = report["concept"].map(betas)
    null = report["arm"].str.startswith("random:") & np.isclose(report["beta"], chosen)
    rows = report[mine | null]
    effects = paired_effects(rows, config)
    null = above_null(effects)
    raw = effects[effects["arm"] == CONCEPT_ARM]
    out = []
    for (synset, sign), group in null.groupby(["concept", "sign"]):
        mine_rows = raw[(raw["concept"] == synset) & (raw["sign"] == sign)]
        out.append(
            {
                "concept": synset,
                "sign": int(sign),
                "above_null": float(group["above_null"].mean()),
                "effect": float(mine_rows["e_gated"].mean()),
                "gate_pass": float(mine_rows["gate_pass"].mean()),
                "n": len(group),
            }
        )
    return pd.DataFrame(out)


def run_calibration(
    config: ExperimentConfig,
    lm=None,
    embedder=None,
    resume: str | None = None,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> CalibrationResult:
    """Run (or resume) the whole study and log it to the ``phase6-calibration`` experiment."""
    from experiments.calibration.analysis import analyse_curve
    from experiments.calibration.publish import publish_study

    say = progress or (lambda _msg: None)
    timer = Timer()
    cal = config.calibration
    if resume:
        run_dir = RunDir.locate(tracking.get_run(resume))
        config = run_dir.load_config()
        cal = config.calibration
    with timer.time("model_load"):
        if lm is None:
            from steering.models import load_model

            say(f"loading model {config.model}")
            lm = load_model(config.model, config.device, config.dtype, config.model_load_format)
        if embedder is None:
            from metrics.embedder import load_embedder

            embedder = load_embedder(config.embedding.model)
    graph = load_concepts(
        config.concepts.file, limit=config.concepts.limit, synsets=config.concepts.synsets
    )
    default_layer = config.layer if config.layer is not None else lm.default_layer
    layers = [lm.check_layer(x) for x in (cal.layers or [default_layer])]
    if resume:
        run_id = resume
        tracking.client().update_run(run_id, "RUNNING")
    else:
        run_id = tracking.start_run(
            cal.experiment,
            f"phase6 {lm.model_id} L{','.join(map(str, layers))} "
            f"{len(cal.sizes)} sizes × {len(cal.sources)} sources × {len(cal.probe_seeds)} seeds",
            tags={"phase": PHASE},
        )
        tracking.log_params(run_id, {f"config.{k}": v for k, v in config.flat().items()})
        run_dir = RunDir(cal.results_dir, run_id)
        tracking.client().set_tag(run_id, RUN_DIR_TAG, str(run_dir.path.resolve()))
    run_dir.create()
    run_dir.write_config(config)
    try:
        with timer.time("centroids"):
            scorer = build_scorer(config, graph, embedder)
        selections: dict[str, dict] = {}
        predictors: dict[str, dict] = {}
        alphas: dict[int, float] = {}
        for i, spec in enumerate(specs(config, layers)):
            say(f"probe set {i + 1}: {spec.tag}")
            with timer.time("classifiers"):
                probes = ensure_classifiers(_probe_config(config, spec), lm, graph, spec.layer)
            if spec.layer not in alphas:
                from steering.activations import residual_scale

                alphas[spec.layer] = residual_scale(
                    lm, neutral_texts(graph, config.seed), spec.layer
                )
            source_config = _source_config(config, spec.source)
            with timer.time("vectors"):
                vectors = build_vectors(
                    source_config, lm, graph, probes, spec.layer, alpha=alphas[spec.layer]
                )
            predictors[spec.tag] = probe_predictors(probes, cal.predictors)
            plan = build_plan(source_config, graph, vectors, "selection", vectors_tag=spec.tag)
            generate(source_config, plan, vectors, lm, run_dir, timer, on_batch=on_batch)
            rows = [g for g in run_dir.read_generations() if g["key"] in plan.meta]
            with timer.time("embedding"):
                scores = {s["key"]: s for s in score_all(scorer, rows)}
            chosen = select_betas(pd.DataFrame([{**g, **scores[g["key"]]} for g in rows]), config)
            selections[spec.tag] = chosen
            betas = {k: v["beta"] for k, v in chosen.items()}
            plan = build_plan(source_config, graph, vectors, "report", betas, vectors_tag=spec.tag)
            generate(source_config, plan, vectors, lm, run_dir, timer, on_batch=on_batch)
        run_dir.write_json(SELECTION_FILE, selections)
        run_dir.write_json(PROBES_FILE, predictors)
        say("scoring every generation and fitting the curve")
        generations = run_dir.read_generations()
        with timer.time("embedding"):
            all_scores = score_all(scorer, generations)
        run_dir.write_scores(all_scores)
        by_key = {s["key"]: s for s in all_scores}
        records = pd.DataFrame([{**g, **by_key[g["key"]]} for g in generations])
        curve = build_curve(records, specs(config, layers), predictors, selections, config)
        analysis = analyse_curve(curve, config)
        with timer.time("logging"):
            publish_study(run_id, run_dir, config, curve, analysis, timer.stages)
    except BaseException:
        tracking.end_run(run_id, "KILLED")
        raise
    tracking.end_run(run_id)
    return CalibrationResult(run_id, run_dir.path, curve, analysis, dict(timer.stages))


def build_curve(
    records: pd.DataFrame,
    all_specs: list[ProbeSetSpec],
    predictors: dict[str, dict],
    selections: dict[str, dict],
    config: ExperimentConfig,
) -> pd.DataFrame:
    """One row per (probe set, concept): predictors, chosen β and the effect above null."""
    rows = []
    for spec in all_specs:
        betas = {k: v["beta"] for k, v in selections.get(spec.tag, {}).items()}
        effects = effects_for(records, spec.tag, betas, config)
        for synset, preds in predictors[spec.tag].items():
            mine = effects[effects["concept"] == synset]
            by_sign = {int(r["sign"]): r for _, r in mine.iterrows()}
            pos, neg = by_sign.get(1), by_sign.get(-1)
            values = [r["above_null"] for r in (pos, neg) if r is not None]
            rows.append(
                {
                    "tag": spec.tag,
                    "layer": spec.layer,
                    "size": spec.size,
                    "n_train": sum(int(x) for x in spec.size.split("x")),
                    "seed": spec.seed,
                    "source": spec.source,
                    "concept": synset,
                    **preds,
                    "beta": selections.get(spec.tag, {}).get(synset, {}).get("beta"),
                    "effect_above_null_pos": None if pos is None else pos["above_null"],
                    "effect_above_null_neg": None if neg is None else neg["above_null"],
                    "effect_above_null": float(np.mean(values)) if values else None,
                    "gate_pass": float(
                        np.mean([r["gate_pass"] for r in (pos, neg) if r is not None])
                    )
                    if values
                    else None,
                }
            )
    return pd.DataFrame(rows)


def load_study(run_id: str) -> tuple[RunDir, dict]:
    """A finished study's folder and its analysis (for reports and tests)."""
    run_dir = RunDir.locate(tracking.get_run(run_id))
    return run_dir, json.loads(run_dir.file("analysis.json").read_text())
