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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from experiments import tracking
from experiments.concepts import load_concepts
from experiments.config import ExperimentConfig
from experiments.identify.prereg import (
    PreregistrationError,
    check_heldout,
    ledger_entry,
    load_preregistration,
    record_heldout,
    split_concepts,
)
from experiments.pipeline.lifecycle import open_run
from experiments.record import IdentifyRecord, plain
from experiments.rundir import RunDir, atomic_write_text

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
        tables, analysis, between, validation, phase6_frame, phase6 = _analyse(
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
            name_free = _name_free_detection(config, graph, concepts, directions, data, embed)
    return Directions(layer, concepts, data, alpha, directions, detections, texts, name_free)


def _name_free_detection(config, graph, concepts, directions, data, embed) -> dict:
    """Every direction's AUROC on name-free test positives (one more pass over the model,
    so the named texts' activations are those of a study without this)."""
    from experiments.identify.detect import name_free_auroc
    from experiments.identify.namefree import name_free_positives

    n = config.classifier.eval_per_class
    positives = {c: name_free_positives(graph.get(c), n, config.seed) for c in concepts}
    texts = sorted({t for ts in positives.values() for t in ts})
    features = np.asarray(embed(texts), dtype=np.float64) if texts else np.zeros((0, 0))
    row = {t: i for i, t in enumerate(texts)}
    return {
        (c, d_id): name_free_auroc(
            v, features[[row[t] for t in positives[c]]], data.concepts[c].test
        )
        for c, by_id in directions.vectors.items()
        for d_id, v in by_id.items()
        if positives[c]
    }


def _outcomes(session, config, found: Directions, scorer, on_batch, say) -> Outcomes:
    """Stages 4-7: v*'s held-out β, the likelihood outcome of every direction and the
    prompting baseline, the output-side readouts, generations for the validating subset."""
    from experiments.identify.crosscheck import canonical
    from experiments.identify.directions import REFERENCE
    from experiments.identify.generation import (
        generate_validation,
        select_reference_betas,
        validation_effects,
        vector_set,
    )
    from experiments.identify.matched import stratified_subset
    from experiments.identify.outcome import (
        output_predictors,
        prompt_baseline,
        score_dose,
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
    subset, dose = [], []
    if ident.subset_concepts:
        subset = stratified_subset(
            {c: found.detections[(c, REFERENCE)].auroc for c in concepts},
            ident.subset_concepts,
            config.seed,
        )
        run_dir.write_json(RunDir.SUBSET, {"concepts": subset, "by": "v* test AUROC tertiles"})
        say(f"dose: the stratified subset {', '.join(subset)}, fixed and KL-matched doses")
        with timer.time("dose"):
            dose = score_dose(
                lm, config, run_dir, layer, alpha, betas, texts, vectors, subset, outputs,
                prompts, say,
            )  # fmt: skip
    name_free: list[dict] = []
    if subset and ident.name_free:
        from experiments.identify.namefree import name_free_likelihood_texts
        from steering.likelihood import encode_texts

        free = name_free_likelihood_texts(
            load_concepts(config.concepts.file),
            subset,
            ident.texts_per_concept,
            config.seed,
            length=lambda t: len(encode_texts(lm, [t], ident.prefix)[0].target),
        )
        run_dir.write_json(RunDir.NAME_FREE_TEXTS, free.to_dict())
        say(f"the likelihood outcome on name-free texts ({len(free.on)} concepts)")
        with timer.time("name_free"):
            name_free = score_likelihood(
                lm, config, run_dir, layer, alpha, betas, free,
                {c: vectors[c] for c in subset if c in free.on}, say, file=RunDir.NAME_FREE,
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
    every = [t for t in dict.fromkeys(d for c in subset for d in vectors[c]) if t not in tags]
    if subset and ident.subset_generate:
        say(f"generations for every direction of the subset ({len(every)} more directions)")
        for t in every:  # a direction some concept lacks (e.g. no "other") skips it
            having = [c for c in subset if t in vectors[c]]
            generate_validation(
                session,
                with_subset_prompts(config),
                {t: vector_set(config, layer, alpha, {c: vectors[c][t] for c in having})},
                betas,
                on_batch,
                graph=session.graph.select(synsets=having),
            )
    session.close_executor()
    gen_cells, gen_units = validation_effects(session, config, scorer, [*tags, *every])
    return Outcomes(
        betas, likelihood, baseline_rows, outputs, gen_cells, gen_units, subset, dose, name_free
    )


def with_subset_prompts(config: ExperimentConfig) -> ExperimentConfig:
    """The config the subset generates under: ``identify.subset_prompts`` appended to the
    report prompts, the selection prompts (the first ones) unchanged, so the rows the
    subset shares with the rest of the study keep their keys."""
    from experiments.pipeline.plan import split_prompts

    extra = config.identify.subset_prompts
    if not extra:
        return config
    if config.generation.suppression_prompts:
        raise ValueError(
            "identify.subset_prompts cannot be combined with generation.suppression_prompts "
            "(they would shift the suppression prompts' indices): set one of them"
        )
    prompts = [*config.generation.prompts, *extra]
    n_select = len(split_prompts(len(config.generation.prompts), config)[0])
    selection = config.selection.model_copy(
        update={"selection_prompts": (n_select + 0.5) / len(prompts)}
    )
    generation = config.generation.model_copy(update={"prompts": prompts})
    return config.model_copy(update={"generation": generation, "selection": selection})


def _analyse(session, config, found: Directions, outcomes: Outcomes, prereg, say):
    """Stage 8: the tables, the analysis, the between-concept view, the generation check,
    and the Phase 6 re-analysis when one is named."""
    from experiments.identify import analysis as analysis_mod
    from experiments.identify.cells import build_tables
    from experiments.identify.crosscheck import canonical, crosscheck
    from experiments.identify.estimator import subset_outcomes
    from experiments.pipeline.plan import PROMPT_ARM

    ident, concepts = config.identify, found.concepts
    strengths = [float(x) for x in ident.strengths]
    primary_strength = float(prereg.primary["strength"]) if prereg else None
    # the effect: at the pre-registered strength when it is measured, else the mean over
    # the strengths; every strength also gets its own column (the dose: 0.5x, 1x, 2x β)
    main = [primary_strength] if primary_strength in strengths else strengths
    effects = _effects(outcomes.likelihood, main)
    test_labels = {c: found.data.concepts[c].test[1] for c in concepts}
    tables = build_tables(
        found.directions.specs,
        found.directions.vectors,
        found.detections,
        test_labels,
        effects,
        outcomes.outputs,
        found.directions.details,
        ident,
        config.seed,
    )
    if len(strengths) > 1:
        frame = tables.directions
        for strength in strengths:
            at = {
                k: float(np.mean(v)) for k, v in _effects(outcomes.likelihood, [strength]).items()
            }
            frame[f"effect_at_{strength:g}"] = [
                at.get((c, d), np.nan)
                for c, d in zip(frame["concept"], frame["direction"], strict=True)
            ]
    if outcomes.subset:
        subset_columns(tables.directions, outcomes.dose, outcomes.generated)
    name_free_columns(tables.directions, found.name_free_auroc, outcomes.name_free)
    base = pd.DataFrame(outcomes.baseline_rows)
    baseline = base.groupby("concept")["e"].mean().to_dict() if len(base) else {}
    n_boot, seed = config.criteria.n_boot, config.seed
    analysis = analysis_mod.analyse(
        tables, baseline, ident.targets, prereg.primary if prereg else None, n_boot, seed
    )
    if outcomes.subset:
        analysis["identified"]["subset"] = subset_outcomes(
            tables.directions, outcomes.subset, n_boot=n_boot, seed=seed
        )
    between = analysis_mod.between_concepts(
        tables, test_labels, found.detections, effects, n_boot, seed
    )
    # the cross-check reads the validating tags only (the subset's directions are its own)
    tags = {canonical(d) for d in ident.generated} | {"null", PROMPT_ARM}
    gen, units = outcomes.generated, outcomes.generated_units
    if len(gen):
        gen, units = gen[gen["direction"].isin(tags)], units[units["direction"].isin(tags)]
    validation = crosscheck(tables, gen, units, effects, n_boot, seed)
    phase6_frame, phase6 = None, None
    if ident.phase6_run:
        from experiments.identify.phase6 import reanalyse

        phase6_frame, phase6 = reanalyse(ident.phase6_run, session.lm, n_boot, seed, say)
    return tables, analysis, between, validation, phase6_frame, phase6


def subset_columns(frame: pd.DataFrame, dose: list[dict], generated: pd.DataFrame) -> None:
    """Add the subset's outcomes to the directions table, in place (NaN off the subset):
    ``dose_effect_<label>`` (mean over pairs), the matched dose's multiplier, KL and
    whether it matched; ``gen_effect`` and ``gen_gate`` (s = +1, Δ gated)."""
    from experiments.identify.matched import MATCHED, matched

    key = list(zip(frame["concept"], frame["direction"], strict=True))
    if dose:
        rows = pd.DataFrame(dose)
        means = rows.groupby(["dose", "concept", "direction"])["e"].mean()
        for label in sorted(rows["dose"].unique()):
            at = means.loc[label].to_dict()
            frame[f"dose_effect_{label}"] = [at.get(k, np.nan) for k in key]
        facts = rows[rows["dose"] == MATCHED].groupby(["concept", "direction"]).first()
        for column, source in (("dose_multiplier", "multiplier"), ("dose_kl", "kl")):
            at = facts[source].to_dict()
            frame[column] = [at.get(k, np.nan) for k in key]
        target = facts["kl_target"].to_dict()
        frame["dose_matched"] = [
            bool(matched(np.array([at_kl]), target[k])[0]) if k in target else np.nan
            for k, at_kl in zip(key, frame["dose_kl"], strict=True)
        ]
    if len(generated):
        up = generated[generated["sign"] == 1].set_index(["concept", "direction"])
        for column, source in (("gen_effect", "e_gen"), ("gen_gate", "gate")):
            at = up[source].to_dict()
            frame[column] = [at.get(k, np.nan) for k in key]


def name_free_columns(frame: pd.DataFrame, auroc: dict, likelihood: list[dict]) -> None:
    """``auroc_name_free`` (every concept with name-free positives) and
    ``effect_name_free`` (the subset, mean over pairs at s = +1), in place."""
    key = list(zip(frame["concept"], frame["direction"], strict=True))
    if auroc:
        frame["auroc_name_free"] = [auroc.get(k, np.nan) for k in key]
    if likelihood:
        rows = pd.DataFrame(likelihood)
        at = rows[rows["strength"] > 0].groupby(["concept", "direction"])["e"].mean().to_dict()
        frame["effect_name_free"] = [at.get(k, np.nan) for k in key]


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
