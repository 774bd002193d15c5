"""``steer-eval identify``: vary detection quality on its own and measure what it does to
steering.

It opens like every run (``pipeline/lifecycle.open_run``: parent run FINISHED, KILLED
or FAILED; rows generated on ``execution.executor``) in the ``phase6-identify``
experiment, on the development concepts by default (``--heldout``: the held-out ones,
once per pre-registration). Stages, each timed:

1. ``activations``: every probe, test, validation and neutral text at the layer, once;
2. ``directions``: v* and every manipulated direction (``identify/data.py``);
3. ``detection``: each direction scored as its own detector (``detect.py``);
4. ``selection``: the held-out β of v* per concept, by generation (``generation.py``);
5. ``likelihood``: the likelihood outcome of every direction at that β, and the
   prompting baseline on the same texts (``outcome.py``);
6. ``readout``: the logit-lens gain and the next-token KL of every direction;
7. ``validation``: generations for the validating subset, scored by Δ;
8. ``analysis`` and ``logging`` (``analysis.py``, ``crosscheck.py``, ``phase6.py``,
   ``publish.py``).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from experiments import tracking
from experiments.concepts import load_concepts
from experiments.config import ExperimentConfig
from experiments.identify.prereg import (
    PreregistrationError,
    check_heldout,
    load_preregistration,
    record_heldout,
    split_concepts,
)
from experiments.pipeline.lifecycle import open_run
from experiments.rundir import RunDir, atomic_write_text

PHASE = "6-identify"


@dataclass
class IdentifyResult:
    run_id: str
    run_dir: Path
    analysis: dict
    directions: pd.DataFrame
    timings: dict[str, float] = field(default_factory=dict)


def concept_sets(config: ExperimentConfig) -> dict[str, list[str]]:
    """The development and held-out concepts of the concept file (all of it)."""
    full = load_concepts(config.concepts.file)
    ident = config.identify
    dev, held = split_concepts(
        [c.synset for c in full.concepts], ident.heldout_fraction, ident.split_seed
    )
    return {"development": dev, "heldout": held}


def with_concepts(config: ExperimentConfig) -> tuple[ExperimentConfig, dict[str, list[str]]]:
    """The config restricted to its concept set (``identify.limit``: the first N)."""
    sets = concept_sets(config)
    chosen = sets[config.identify.concept_set]
    if config.identify.limit:
        chosen = chosen[: config.identify.limit]
    concepts = config.concepts.model_copy(update={"synsets": chosen, "limit": None})
    return config.model_copy(update={"concepts": concepts}), sets


def peak_memory() -> dict[str, float]:
    """Peak resident memory of this process (and of the card, on CUDA), MiB."""
    out = {"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    import torch

    if torch.cuda.is_available():
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def _effects(records: list[dict], strengths: list[float]) -> dict[tuple[str, str], np.ndarray]:
    """Per (concept, direction): the per-pair effect, averaged over the strengths."""
    by: dict[tuple[str, str], dict[float, dict[int, float]]] = {}
    for r in records:
        by.setdefault((r["concept"], r["direction"]), {}).setdefault(r["strength"], {})[
            r["pair"]
        ] = r["e"]
    out = {}
    for key, per_s in by.items():
        if all(s in per_s for s in strengths):
            pairs = sorted(per_s[strengths[0]])
            out[key] = np.mean([[per_s[s][p] for p in pairs] for s in strengths], axis=0)
    return out


def run_identify(
    config: ExperimentConfig,
    lm=None,
    embedder=None,
    resume: str | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> IdentifyResult:
    """Run (or resume) the identification study; see the module docstring."""
    started = time.perf_counter()
    say = progress or (lambda _m: None)
    sets: dict[str, list[str]] = {}
    prereg = None
    earlier: list[dict] = []
    if resume is None:
        config, sets = with_concepts(config)
        try:
            prereg = load_preregistration(config.identify.preregistration)
        except PreregistrationError:
            if config.identify.concept_set == "heldout":
                raise
        if config.identify.concept_set == "heldout":
            assert prereg is not None
            earlier = check_heldout(
                prereg, config.identify.experiment, config.identify.results_dir, force
            )
    with open_run(
        None if resume else config, existing=resume, lm=lm, embedder=embedder, progress=say
    ) as session:
        config = session.config
        if resume is not None:
            sets = concept_sets(config)
            try:
                prereg = load_preregistration(config.identify.preregistration)
            except PreregistrationError:
                prereg = None
        result = _run(session, config, sets, prereg, earlier, force, say, on_batch, started)
    return result


def _run(session, config, sets, prereg, earlier, force, say, on_batch, started) -> IdentifyResult:
    from experiments.identify import analysis as analysis_mod
    from experiments.identify.cells import build_tables
    from experiments.identify.crosscheck import canonical, crosscheck
    from experiments.identify.data import build_directions, collect
    from experiments.identify.detect import score_direction
    from experiments.identify.generation import (
        generate_validation,
        select_reference_betas,
        validation_effects,
        vector_set,
    )
    from experiments.identify.outcome import output_predictors, prompt_baseline, score_likelihood
    from experiments.identify.publish import publish_identify
    from experiments.likelihood_texts import build_likelihood_texts
    from experiments.pipeline.score import build_scorer
    from experiments.pipeline.vectors import neutral_texts
    from experiments.prompts import render_generation_prompts
    from steering.activations import pooled_activations, residual_scale
    from steering.likelihood import encode_texts
    from steering.memory import activation_texts

    ident, timer, lm, graph = config.identify, session.timer, session.lm, session.graph
    layer = session.layer()
    concepts = [c.synset for c in graph.concepts]
    heldout = ident.concept_set == "heldout"
    run_id, new = session.start(
        ident.experiment,
        f"identify {ident.concept_set} {lm.model_id} L{layer} {len(concepts)} concepts",
        ident.results_dir,
        tags={
            "phase": PHASE,
            "identify.concept_set": ident.concept_set,
            "identify.label": "confirmatory (primary analysis only)"
            if heldout and not earlier
            else "exploratory",
            **({"identify.prereg_sha256": prereg.sha256} if prereg else {}),
            **({"identify.forced": "true"} if heldout and earlier else {}),
        },
    )
    run_dir = session.run_dir
    assert run_dir is not None
    if new:
        tracking.log_params(run_id, {f"config.{k}": v for k, v in config.flat().items()})
    run_dir.write_config(config)
    run_dir.write_json(
        RunDir.CONCEPT_SPLIT, {**sets, "this_run": ident.concept_set, "concepts": concepts}
    )
    if prereg is not None:
        atomic_write_text(run_dir.file(RunDir.PREREGISTRATION), prereg.path.read_text())

    say(f"activations of every probe, test and neutral text at layer {layer}")
    with timer.time("activations"):
        data = collect(
            config,
            graph,
            concepts,
            lambda texts: pooled_activations(
                lm, texts, layer, batch_size=activation_texts(lm, 64)
            ).numpy(),
        )
        alpha = residual_scale(lm, neutral_texts(graph, config.seed), layer)
    with timer.time("directions"):
        directions = build_directions(config, data)
    say(f"{len(directions.specs)} directions per concept; scoring each as a detector")
    with timer.time("detection"):
        detections = {
            (c, d_id): score_direction(v, data.concepts[c].test, data.concepts[c].validation)
            for c, by_id in directions.vectors.items()
            for d_id, v in by_id.items()
        }
    with timer.time("centroids"):
        scorer = build_scorer(config, graph, session.embedder)
    say("held-out strength of the reference direction (generation)")
    references = vector_set(config, layer, alpha, {c: directions.reference(c) for c in concepts})
    chosen = select_reference_betas(session, config, references, scorer, on_batch)
    betas = {c: float(chosen[c]["beta"]) for c in concepts}
    run_dir.write_json(RunDir.SELECTION, chosen)

    full = load_concepts(config.concepts.file)
    with timer.time("likelihood_texts"):
        texts = build_likelihood_texts(
            full,
            ident.texts_per_concept,
            config.seed,
            length=lambda t: len(encode_texts(lm, [t], ident.prefix)[0].target),
        )
    with timer.time("likelihood"):
        records = score_likelihood(
            lm, config, run_dir, layer, alpha, betas, texts, directions.vectors, say
        )
        baseline_rows = prompt_baseline(
            lm, config, texts, concepts, {c.synset: c.name for c in graph.concepts}
        )
    from experiments.rundir import append_jsonl

    run_dir.file(RunDir.PROMPT_BASELINE).unlink(missing_ok=True)
    append_jsonl(run_dir.file(RunDir.PROMPT_BASELINE), baseline_rows)
    say("logit-lens gain and next-token KL of every direction")
    with timer.time("readout"):
        prompts = {
            c.synset: render_generation_prompts(c, config.generation.prompts)
            for c in graph.concepts
        }
        words = {c.synset: list(c.lemmas) or [c.name] for c in graph.concepts}
        outputs = output_predictors(
            lm,
            config,
            layer,
            alpha,
            betas,
            directions.vectors,
            data.neutral_texts[: ident.lens_positions],
            words,
            prompts,
        )
    tags = []
    for d_id in ident.generated:
        name = canonical(d_id)
        if all(name in directions.vectors[c] for c in concepts) and name not in tags:
            tags.append(name)
    say(f"generations for the validating subset: {', '.join(tags)}")
    sets_v = {
        t: vector_set(config, layer, alpha, {c: directions.vectors[c][t] for c in concepts})
        for t in tags
    }
    generate_validation(session, config, sets_v, betas, on_batch)
    session.close_executor()
    gen_cells, gen_units = validation_effects(session, config, scorer, tags)

    say("the analysis")
    with timer.time("analysis"):
        effects = _effects(records, ident.strengths)
        test_labels = {c: data.concepts[c].test[1] for c in concepts}
        tables = build_tables(
            directions.specs,
            directions.vectors,
            detections,
            test_labels,
            effects,
            outputs,
            directions.details,
            ident,
            config.seed,
        )
        base = pd.DataFrame(baseline_rows)
        baseline = base.groupby("concept")["e"].mean().to_dict() if len(base) else {}
        n_boot, seed = config.criteria.n_boot, config.seed
        result = analysis_mod.analyse(
            tables, baseline, ident.targets, prereg.primary if prereg else None, n_boot, seed
        )
        result["betas"] = betas
        result["alpha"] = alpha
        result["layer"] = layer
        result["between_concepts"] = analysis_mod.between_concepts(
            tables, test_labels, detections, effects, n_boot, seed
        )
        result["validation"] = crosscheck(tables, gen_cells, gen_units, effects, n_boot, seed)
        result["concept_set"] = ident.concept_set
        result["preregistration"] = prereg.to_dict() if prereg else None
        result["label"] = (
            "confirmatory: the primary analysis on held-out concepts, first scoring"
            if heldout and not earlier
            else "forced re-scoring of held-out concepts: not confirmatory"
            if heldout
            else "exploratory: development concepts"
        )
        phase6_frame = None
        if ident.phase6_run:
            from experiments.identify.phase6 import reanalyse

            phase6_frame, result["phase6"] = reanalyse(ident.phase6_run, lm, n_boot, seed, say)
    timings = dict(timer.stages)
    timings["total"] = time.perf_counter() - started
    result["resources"] = {"wall_seconds": timings["total"], **peak_memory()}
    with timer.time("logging"):
        publish_identify(run_id, run_dir, config, tables, result, gen_cells, phase6_frame, timings)
    if heldout:
        tracking.client().set_tag(run_id, "identify.scored", "true")
        record_heldout(
            ident.results_dir,
            {
                "run_id": run_id,
                "prereg_sha256": prereg.sha256 if prereg else None,
                "forced": bool(earlier),
                "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "primary": (result.get("primary") or {}).get("verdict"),
            },
        )
    return IdentifyResult(run_id, run_dir.path, result, tables.directions, timings)
