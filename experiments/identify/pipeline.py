"""identify's stages 1-7, from the session to what its analysis reads: every direction
and its detection quality (:func:`directions`), then how each steers (:func:`outcomes`).
The study (``identify/study.py``) runs them, analyses and publishes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from experiments.concepts import load_concepts
from experiments.identify.stages.subset import (
    choose_subset,
    generate_subset,
    name_free_detection,
    nll_scorer,
    subset_likelihood,
)
from experiments.rundir import RunDir

if TYPE_CHECKING:
    import numpy as np

    from experiments.config import IdentifyStudyConfig
    from experiments.identify.stages.data import DirectionSet, StudyData
    from experiments.identify.stages.detect import Detection
    from experiments.kernel.lifecycle import RunSession
    from experiments.kernel.score import Scorer
    from experiments.likelihood_texts import LikelihoodTexts


@dataclass
class Directions:
    """Every direction of the study and its detection quality (stages 1-3)."""

    layer: int
    concepts: list[str]
    data: StudyData  # activations of the probe, test and neutral texts
    alpha: float  # the median residual norm at the layer
    directions: DirectionSet  # v* and every manipulated direction
    # (concept, direction id) -> the direction scored as a detector
    detections: dict[tuple[str, str], Detection]
    texts: LikelihoodTexts  # the likelihood outcome's text pairs
    # (concept, direction id) -> AUROC on name-free positives
    name_free_auroc: dict[tuple[str, str], float]


@dataclass
class Outcomes:
    """How every direction steers (stages 4-7)."""

    betas: dict[str, float]  # v*'s held-out β per concept
    likelihood: list[dict[str, Any]]  # the likelihood outcome per direction × strength × pair
    baseline_rows: list[dict[str, Any]]  # the prompting baseline on the same texts
    # logit-lens gain and next-token KL per (concept, direction id)
    outputs: dict[tuple[str, str], dict[str, np.ndarray]]
    generated: pd.DataFrame  # generated cells (Δ, gated): validating tags and the subset
    generated_units: pd.DataFrame
    subset: list[str]  # the stratified subset: doses and every direction generated
    dose: list[dict[str, Any]]  # the subset's likelihood outcome at fixed and KL-matched doses
    name_free: list[dict[str, Any]]  # the subset's likelihood outcome on name-free texts


def directions(
    session: RunSession[IdentifyStudyConfig],
    config: IdentifyStudyConfig,
    say: Callable[[str], None],
) -> Directions:
    """Stages 1-3: activations, every direction, each scored as its own detector."""
    from experiments.identify.stages.data import build_directions, collect
    from experiments.identify.stages.detect import score_direction
    from experiments.kernel.vectors import neutral_texts
    from experiments.likelihood_texts import build_likelihood_texts
    from steering.activations import pooled_activations, residual_scale
    from steering.likelihood import encode_texts
    from steering.memory import activation_texts

    timer, lm, graph = session.timer, session.model, session.graph
    layer = session.layer()
    concepts = [c.synset for c in graph.concepts]
    say(f"activations of every probe, test and neutral text at layer {layer}")
    with timer.time("activations"):

        def embed(texts: list[str]) -> np.ndarray:
            return pooled_activations(lm, texts, layer, batch_size=activation_texts(lm, 64)).numpy()

        data = collect(config, graph, concepts, embed)
        alpha = residual_scale(lm, neutral_texts(graph, config.seed), layer)
    with timer.time("likelihood_texts"):
        texts = build_likelihood_texts(
            load_concepts(config.concepts.file),
            config.likelihood.texts,
            config.seed,
            length=lambda t: len(encode_texts(lm, [t], config.likelihood.prefix)[0].target),
        )
    with timer.time("directions"):
        avoid = {c: set(texts.off_source.get(c, [])) for c in concepts}
        directions = build_directions(config, data, avoid)
    say(f"{len(directions.specs)} directions per concept; scoring each as a detector")
    held_out = config.identify.auroc_texts == "held_out"
    with timer.time("detection"):
        detections = {
            (d.concept, d.id): score_direction(
                d.array(),
                data.concepts[d.concept].test,
                data.concepts[d.concept].validation,
                held_out=held_out,
            )
            for d in directions
        }
        name_free: dict[tuple[str, str], float] = {}
        if config.identify.name_free:
            scorer = nll_scorer(lm, config.likelihood.prefix)
            name_free = name_free_detection(
                config, graph, concepts, directions, data, embed, scorer
            )
    return Directions(layer, concepts, data, alpha, directions, detections, texts, name_free)


def outcomes(
    session: RunSession[IdentifyStudyConfig],
    config: IdentifyStudyConfig,
    found: Directions,
    scorer: Scorer,
    on_batch: Callable[[int, int], None] | None,
    say: Callable[[str], None],
) -> Outcomes:
    """Stages 4-7: v*'s held-out β, the likelihood outcome of every direction and the
    prompting baseline, the output-side readouts, generations for the validating subset."""
    from experiments.identify.estimation.crosscheck import canonical
    from experiments.identify.stages.generation import (
        generate_validation,
        select_reference_betas,
        validation_effects,
        vector_set,
    )
    from experiments.identify.stages.outcome import (
        Steering,
        output_predictors,
        prompt_baseline,
        score_likelihood,
    )
    from experiments.prompts import render_generation_prompts
    from experiments.rundir import append_jsonl

    ident, timer, lm, graph = config.identify, session.timer, session.model, session.graph
    run_dir = session.directory  # the study's stages run in a started session
    layer, alpha, concepts = found.layer, found.alpha, found.concepts
    directions = found.directions
    say("held-out strength of the reference direction (generation)")
    references = vector_set(config, layer, alpha, [directions.reference(c) for c in concepts])
    chosen = select_reference_betas(session, config, references, scorer, on_batch)
    betas = {c: float(chosen[c]["beta"]) for c in concepts}
    run_dir.write_json(RunDir.SELECTION, chosen)

    texts = found.texts
    steering = Steering(lm, config, run_dir, layer, alpha, betas, directions)
    with timer.time("likelihood"):
        likelihood = score_likelihood(steering, texts, say)
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
            steering, found.data.neutral_texts[: ident.lens_positions], words, prompts
        )
    subset: list[str] = []
    dose: list[dict[str, Any]] = []
    name_free: list[dict[str, Any]] = []
    if ident.subset_concepts:
        subset = choose_subset(config, found.detections, concepts, run_dir)
        dose, name_free = subset_likelihood(
            steering, timer, texts, subset, outputs, prompts, say, words
        )
    named = dict.fromkeys(canonical(d_id) for d_id in ident.generated)  # in order, once each
    tags = [t for t in named if all(directions.has(c, t) for c in concepts)]
    say(f"generations for the validating subset: {', '.join(tags)}")
    sets_v = {t: vector_set(config, layer, alpha, directions.across(t, concepts)) for t in tags}
    generate_validation(session, config, sets_v, betas, on_batch)
    every = generate_subset(session, steering, subset, tags, on_batch, say)
    session.close_executor()
    gen_cells, gen_units = validation_effects(session, config, scorer, [*tags, *every])
    return Outcomes(
        betas, likelihood, baseline_rows, outputs, gen_cells, gen_units, subset, dose, name_free
    )
