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
8. ``analysis`` and ``logging`` (``tabulate.py``, ``analysis.py``, ``crosscheck.py``, ``phase6.py``,
   ``publish.py``).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments import tracking
from experiments.concepts import load_concepts
from experiments.config import ConfigError, ExperimentConfig
from experiments.identify.prereg import (
    PreregistrationError,
    check_heldout,
    ledger_entry,
    load_preregistration,
    record_heldout,
    split_concepts,
)
from experiments.identify.subset import (
    choose_subset,
    generate_subset,
    name_free_detection,
    subset_likelihood,
)
from experiments.identify.tabulate import analyse_study
from experiments.pipeline.lifecycle import open_run
from experiments.record import IdentifyRecord, plain
from experiments.rundir import RunDir, atomic_write_text
from experiments.strength_range import BETA_TAG, range_warning, shared_range

PHASE = "6-identify"
# The stages a study times, in order (its record's timings; `identify --dry-run` lists them).
STAGES = ["model_load", "activations", "likelihood_texts", "directions", "detection",
          "centroids", "generation", "perplexity", "embedding", "likelihood", "readout",
          "dose", "name_free", "analysis", "logging"]  # fmt: skip


@dataclass
class IdentifyResult:
    run_id: str
    run_dir: Path
    record: IdentifyRecord
    directions: pd.DataFrame


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
        as_given = config  # what the pre-registration binds (before the set's concepts)
        config, sets = with_concepts(config)
        try:
            prereg = load_preregistration(config.identify.preregistration)
        except PreregistrationError:
            if config.identify.concept_set == "heldout":
                raise
        if config.identify.concept_set == "heldout":
            assert prereg is not None
            earlier = check_heldout(
                prereg, config.experiment, config.results_dir, force, config=as_given
            )
    with open_run(
        None if resume else config,
        existing=resume,
        lm=lm,
        embedder=embedder,
        progress=say,
        phase="identify",
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


@dataclass
class Directions:
    """Every direction of the study and its detection quality (stages 1-3)."""

    layer: int
    concepts: list[str]
    data: Any  # identify.data.StudyData: activations of the probe, test and neutral texts
    alpha: float  # the median residual norm at the layer
    directions: Any  # identify.data.Directions: v* and every manipulated direction
    detections: dict  # (concept, direction id) -> the direction scored as a detector
    texts: Any  # likelihood_texts.LikelihoodTexts: the likelihood outcome's text pairs
    name_free_auroc: dict  # (concept, direction id) -> AUROC on name-free positives


@dataclass
class Outcomes:
    """How every direction steers (stages 4-7)."""

    betas: dict[str, float]  # v*'s held-out β per concept
    likelihood: list[dict]  # the likelihood outcome per direction × strength × pair
    baseline_rows: list[dict]  # the prompting baseline on the same texts
    outputs: Any  # logit-lens gain and next-token KL per direction
    generated: pd.DataFrame  # generated cells (Δ, gated): validating tags and the subset
    generated_units: Any
    subset: list[str]  # the stratified subset: doses and every direction generated
    dose: list[dict]  # the subset's likelihood outcome at fixed and KL-matched doses
    name_free: list[dict]  # the subset's likelihood outcome on name-free texts


def _run(session, config, sets, prereg, earlier, force, say, on_batch, started) -> IdentifyResult:
    """The study inside its session: the stages, then the record, then publishing."""
    from experiments.identify.publish import children, views
    from experiments.pipeline.publisher import publish
    from experiments.pipeline.score import build_scorer

    ident, timer = config.identify, session.timer
    heldout = ident.concept_set == "heldout"
    run_id = _start(session, config, sets, prereg, earlier)
    found = _directions(session, config, say)
    with timer.time("centroids"):
        scorer = build_scorer(config, session.graph, session.embedder)
    outcomes = _outcomes(session, config, found, scorer, on_batch, say)
    say("the analysis")
    with timer.time("analysis"):
        tables, analysis, between, validation, phase6_frame, phase6 = analyse_study(
            session, config, found, outcomes, prereg, say
        )
    timings = dict(timer.stages)
    timings["total"] = time.perf_counter() - started
    record = build_record(
        run_id,
        config,
        session.lm.model_id,
        found.layer,
        found.alpha,
        outcomes.betas,
        analysis,
        between,
        validation,
        phase6,
        label(heldout, bool(earlier)),
        prereg,
        {"wall_seconds": timings["total"], **peak_memory()},
        timings,
    )
    with timer.time("logging"):
        publish(
            session,
            record,
            views(record, tables, outcomes.generated, phase6_frame),
            children(record, tables),
            RunDir.ANALYSIS,
        )
    if heldout:
        tracking.client().set_tag(run_id, "identify.scored", "true")
        record_heldout(
            config.results_dir,
            ledger_entry(
                run_id, prereg, bool(earlier), "scored",
                primary=record.primary.verdict if record.primary else None,
            ),
        )  # fmt: skip
    assert session.run_dir is not None
    return IdentifyResult(run_id, session.run_dir.path, record, tables.directions)


def _start(session, config, sets, prereg, earlier) -> str:
    """Open the parent run (tagged with what its inference is worth) and its folder."""
    ident, lm = config.identify, session.lm
    concepts = [c.synset for c in session.graph.concepts]
    heldout = ident.concept_set == "heldout"
    note = range_note(config, lm.probe_id, session.layer())
    if note:
        session.say(note)
    run_id, new = session.start(
        config.experiment,
        f"identify {ident.concept_set} {lm.model_id} L{session.layer()} {len(concepts)} concepts",
        config.results_dir,
        tags={
            "phase": PHASE,
            "identify.concept_set": ident.concept_set,
            "identify.label": "confirmatory (primary analysis only)"
            if heldout and not earlier
            else "exploratory",
            **({"identify.prereg_sha256": prereg.sha256} if prereg else {}),
            **({"identify.forced": "true"} if heldout and earlier else {}),
            **({BETA_TAG: note} if note else {}),
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
    if heldout and new:  # the intent to score, before the first held-out cell
        record_heldout(config.results_dir, ledger_entry(run_id, prereg, bool(earlier), "started"))
    return run_id


def range_note(config: ExperimentConfig, model_id: str, layer: int) -> str | None:
    """A warning when the study's β grid leaves the model's recorded strength range.
    identify steers with its config as given: its pre-registration binds the grid, so
    a range recorded later must not move it; the researcher sets it (the sentence says
    how)."""
    steering = config.steering
    root = Path(config.classifier.dir)
    try:
        found, where = shared_range(root, model_id, layer, steering.mode, steering.vector_source)
    except ConfigError as exc:  # sweeps that disagree: worth saying, not worth stopping
        return str(exc)
    return range_warning(config, found, where)


def _directions(session, config, say) -> Directions:
    """Stages 1-3: activations, every direction, each scored as its own detector."""
    from experiments.identify.data import build_directions, collect
    from experiments.identify.detect import score_direction
    from experiments.likelihood_texts import build_likelihood_texts
    from experiments.pipeline.vectors import neutral_texts
    from steering.activations import pooled_activations, residual_scale
    from steering.likelihood import encode_texts
    from steering.memory import activation_texts

    timer, lm, graph = session.timer, session.lm, session.graph
    layer = session.layer()
    concepts = [c.synset for c in graph.concepts]
    say(f"activations of every probe, test and neutral text at layer {layer}")
    with timer.time("activations"):

        def embed(texts):
            return pooled_activations(lm, texts, layer, batch_size=activation_texts(lm, 64)).numpy()

        data = collect(config, graph, concepts, embed)
        alpha = residual_scale(lm, neutral_texts(graph, config.seed), layer)
    with timer.time("likelihood_texts"):
        texts = build_likelihood_texts(
            load_concepts(config.concepts.file),
            config.identify.texts_per_concept,
            config.seed,
            length=lambda t: len(encode_texts(lm, [t], config.identify.prefix)[0].target),
        )
    with timer.time("directions"):
        avoid = {c: set(texts.off_source.get(c, [])) for c in concepts}
        directions = build_directions(config, data, avoid)
    say(f"{len(directions.specs)} directions per concept; scoring each as a detector")
    with timer.time("detection"):
        detections = {
            (c, d_id): score_direction(v, data.concepts[c].test, data.concepts[c].validation)
            for c, by_id in directions.vectors.items()
            for d_id, v in by_id.items()
        }
        name_free = {}
        if config.identify.name_free:
            name_free = name_free_detection(config, graph, concepts, directions, data, embed)
    return Directions(layer, concepts, data, alpha, directions, detections, texts, name_free)


def _outcomes(session, config, found: Directions, scorer, on_batch, say) -> Outcomes:
    """Stages 4-7: v*'s held-out β, the likelihood outcome of every direction and the
    prompting baseline, the output-side readouts, generations for the validating subset."""
    from experiments.identify.crosscheck import canonical
    from experiments.identify.generation import (
        generate_validation,
        select_reference_betas,
        validation_effects,
        vector_set,
    )
    from experiments.identify.outcome import (
        output_predictors,
        prompt_baseline,
        score_likelihood,
    )
    from experiments.prompts import render_generation_prompts
    from experiments.rundir import append_jsonl

    ident, timer, lm, graph = config.identify, session.timer, session.lm, session.graph
    run_dir, layer, alpha, concepts = session.run_dir, found.layer, found.alpha, found.concepts
    vectors = found.directions.vectors
    say("held-out strength of the reference direction (generation)")
    references = vector_set(
        config, layer, alpha, {c: found.directions.reference(c) for c in concepts}
    )
    chosen = select_reference_betas(session, config, references, scorer, on_batch)
    betas = {c: float(chosen[c]["beta"]) for c in concepts}
    run_dir.write_json(RunDir.SELECTION, chosen)

    texts = found.texts
    with timer.time("likelihood"):
        likelihood = score_likelihood(lm, config, run_dir, layer, alpha, betas, texts, vectors, say)
        baseline_rows = prompt_baseline(
            lm, config, texts, concepts, {c.synset: c.name for c in graph.concepts}
        )
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
            vectors,
            found.data.neutral_texts[: ident.lens_positions],
            words,
            prompts,
        )
    subset, dose, name_free = [], [], []
    if ident.subset_concepts:
        subset = choose_subset(config, found.detections, concepts, run_dir)
        dose, name_free = subset_likelihood(
            lm, config, run_dir, timer, layer, alpha, betas, texts, vectors, subset, outputs,
            prompts, say,
        )  # fmt: skip
    tags = []
    for d_id in ident.generated:
        name = canonical(d_id)
        if all(name in vectors[c] for c in concepts) and name not in tags:
            tags.append(name)
    say(f"generations for the validating subset: {', '.join(tags)}")
    sets_v = {
        t: vector_set(config, layer, alpha, {c: vectors[c][t] for c in concepts}) for t in tags
    }
    generate_validation(session, config, sets_v, betas, on_batch)
    every = generate_subset(
        session, config, layer, alpha, betas, vectors, subset, tags, on_batch, say
    )
    session.close_executor()
    gen_cells, gen_units = validation_effects(session, config, scorer, [*tags, *every])
    return Outcomes(
        betas, likelihood, baseline_rows, outputs, gen_cells, gen_units, subset, dose, name_free
    )


def label(heldout: bool, scored_before: bool) -> str:
    """What the run's inference is worth: the pre-registered test once, else exploratory."""
    if heldout and not scored_before:
        return "confirmatory: the primary analysis on held-out concepts, first scoring"
    if heldout:
        return "forced re-scoring of held-out concepts: not confirmatory"
    return "exploratory: development concepts"


def build_record(
    run_id: str,
    config: ExperimentConfig,
    model_id: str,
    layer: int,
    alpha: float,
    betas: dict[str, float],
    analysis: dict,
    between: dict,
    validation: dict,
    phase6: dict | None,
    label: str,
    prereg,
    resources: dict[str, float],
    timings: dict[str, float],
) -> IdentifyRecord:
    """The study's record, from the stage outputs (a pure function: the prompting
    baseline's interval is a seeded bootstrap over concepts)."""
    from metrics.intervals import bootstrap_statistic

    per_concept = analysis["baseline"]["per_concept"]
    interval = None
    if per_concept:
        interval = bootstrap_statistic(
            list(per_concept.values()),
            lambda units: float(np.mean(units)) if units else None,
            confidence=config.criteria.confidence,
            n_boot=config.criteria.n_boot,
            seed=config.seed,
            method="concepts",
        ).to_dict()
        interval["n_clusters"] = len(per_concept)
    return IdentifyRecord(
        run_id=run_id,
        experiment=config.experiment,
        config=config,
        model_id=model_id,
        timings=timings,
        layer=layer,
        alpha=alpha,
        betas=betas,
        concept_set=config.identify.concept_set,
        label=label,
        preregistration=prereg.to_dict() if prereg else None,
        outcome=analysis["outcome"],
        manipulations=plain(analysis["manipulations"]),
        pooled=plain(analysis["pooled"]),
        baseline={**plain(analysis["baseline"]), "interval": plain(interval)},
        primary=plain(analysis["primary"]),
        identified=plain(analysis["identified"]),
        between_concepts=plain(between),
        validation=plain(validation),
        phase6=plain(phase6),
        resources=plain(resources),
    )
