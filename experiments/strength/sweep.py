"""The strength sweep: the coherent range of β for a model and layer (issue 37, item 4).

A β that steers Gemma 3 270M coherently turns SmolLM2 135M into token soup, so the range
is measured per model, not assumed. For a few concepts the sweep generates each prompt
unsteered and at s = ±1 for every β of a grid (the run's prompts, seeds, sampling and
vectors: the concept probe directions at the layer and the random directions of the
run's null, which on SmolLM2 collapse at a β where the concept's do not; a null in token
soup compares nothing), scores each text's perplexity under
the unsteered model, and judges each β by three measures of the texts against the
unsteered ones: the perplexity multiple, the near-empty share and distinct-2
(``StrengthLimits``: the lines the 270M's sweep in docs/findings.md drew). The range
runs from the smallest coherent β up to the last β before the first incoherent one; a
run takes its top (``experiments/strength/range.py``), where the strongest steering that
still reads as text is.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from experiments import tracking
from experiments.concepts import ConceptGraph
from experiments.config import ConfigError, ExperimentConfig
from experiments.execution.base import PlanSpec
from experiments.execution.local import run_batch
from experiments.pipeline.generate import batch_rows, batches
from experiments.pipeline.plan import CONCEPT_ARM, random_arm, row_key, row_seed
from experiments.pipeline.probes import ensure_classifiers
from experiments.pipeline.vectors import build_vectors
from experiments.prompts import render_generation_prompts
from experiments.rundir import append_jsonl, read_jsonl
from experiments.strength.publish import PHASE, STRENGTH_EXPERIMENT, publish_sweep, run_name
from experiments.strength.range import (
    StrengthLimits,
    StrengthRange,
    StrengthStep,
    save_range,
)
from experiments.tracking.context import MODEL_TAG
from metrics.text import distinct_n, is_near_empty
from steering.generation import GenerationRow, SamplingConfig
from steering.models import LoadedModel

# From "no visible change" to well past the 270M's collapse (|β·s| = 0.3); SmolLM2 135M
# stays coherent to 0.5.
DEFAULT_GRID = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
# The texts of a sweep in progress, beside its classifiers: a stopped sweep resumes from
# them (the same model, layer, βs, prompts and sampling) into the same MLflow run.
PARTIAL_FILE = "strength_sweep.partial.jsonl"
PARTIAL_FORMAT = "steer-eval/strength-sweep-partial"
SIGNS = (-1, 1)


@dataclass(frozen=True)
class SweepText:
    """One generated text of the sweep: β and sign 0 for the unsteered one."""

    beta: float
    sign: int
    text: str
    nll: float | None  # mean per-token NLL under the unsteered model; None: no tokens
    arm: str = CONCEPT_ARM  # what steered it: the concept's direction or a random one


def parse_grid(text: str) -> list[float]:
    """``"0.01,0.1,0.3"`` -> sorted unique βs > 0; a clear error naming the option else."""
    try:
        grid = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        grid = []
    if not grid or any(not (0 < b < math.inf) for b in grid):
        raise ConfigError(f"--grid {text!r}: give βs > 0 separated by commas, e.g. 0.05,0.1,0.2")
    return grid


def sweep_rows(
    config: ExperimentConfig,
    graph: ConceptGraph,
    directions: list[str],
    coefficient: Callable[[str, float, int], float],
) -> tuple[list[GenerationRow], dict[str, tuple[float, int, str]]]:
    """Every prompt and sample of every concept unsteered and at s = ±1 for each β of
    ``config.selection.beta_grid``, by the concept's direction and its random ones (the
    run's null, steered at the same β), on the run's seeds (each steered text has its
    unsteered twin). ``directions``: ``synset`` or ``synset|random:j`` per row direction;
    ``coefficient(direction, beta, sign)`` is that vector's s·β·α."""
    rows, meta = [], {}
    g = config.generation
    index = {name: i for i, name in enumerate(directions)}
    for concept in graph.concepts:
        prompts = render_generation_prompts(concept, g.prompts)
        arms = [CONCEPT_ARM] + [random_arm(j) for j in range(config.controls.random_directions)]
        for p_idx, prompt in enumerate(prompts):
            for sample in range(g.samples_per_prompt):
                seed = row_seed(config.seed, concept.synset, p_idx, sample)
                key = row_key(concept.synset, p_idx, sample, 0.0)
                rows.append(GenerationRow(key, prompt, seed, index[concept.synset], 0.0))
                meta[key] = (0.0, 0, CONCEPT_ARM)
                for beta in config.selection.beta_grid:
                    for sign in SIGNS:
                        for arm in arms:
                            name = concept.synset + ("" if arm == CONCEPT_ARM else f"|{arm}")
                            key = row_key(concept.synset, p_idx, sample, float(sign), arm, beta)
                            c = coefficient(name, beta, sign)
                            rows.append(GenerationRow(key, prompt, seed, index[name], c))
                            meta[key] = (beta, sign, arm)
    return rows, meta


def _distinct_2(texts: Sequence[SweepText]) -> float:
    """Mean distinct-2 of the texts that are not near-empty (loops, not emptiness, which
    the near-empty share counts); 0 when every text is near-empty."""
    values = [distinct_n(t.text, 2) for t in texts if not is_near_empty(t.text)]
    return float(np.mean(values)) if values else 0.0


def _step(
    beta: float,
    sign: int,
    arm: str,
    texts: Sequence[SweepText],
    base: dict,
    limits: StrengthLimits,
) -> StrengthStep:
    ppl = [math.exp(t.nll) for t in texts if t.nll is not None]
    multiple = float(np.median(ppl)) / base["perplexity"] if ppl and base["perplexity"] else None
    near_empty = float(np.mean([is_near_empty(t.text) for t in texts]))
    d2 = _distinct_2(texts)
    why = []
    if multiple is None or multiple > limits.perplexity_multiple:
        why.append(f"perplexity multiple above {limits.perplexity_multiple:g}")
    # one text of slack: a sweep has few texts per β (9 by default), and one more empty
    # text than the unsteered ones is sampling, not collapse
    if near_empty > base["near_empty"] + limits.near_empty_excess + 1 / len(texts):
        why.append(f"near-empty share more than {limits.near_empty_excess:g} above unsteered")
    if d2 < limits.distinct_2_ratio * base["distinct_2"]:
        why.append(f"distinct-2 below {limits.distinct_2_ratio:g}x unsteered")
    return StrengthStep(
        beta=beta,
        sign=sign,
        arm=arm,
        texts=len(texts),
        perplexity_multiple=multiple,
        near_empty=near_empty,
        distinct_2=d2,
        coherent=not why,
        why=why,
    )


def assess(
    texts: Sequence[SweepText], grid: Sequence[float], limits: StrengthLimits
) -> tuple[dict[str, float | None], list[StrengthStep], float | None, float | None]:
    """(the unsteered measures, one step per β, sign and arm, low, high): a β is coherent
    when every sign and arm is; the range is the first coherent β and every coherent one
    after it up to the first that is not."""
    plain = [t for t in texts if t.sign == 0]
    if not plain:
        raise ValueError("the sweep needs unsteered texts (sign 0) to measure against")
    ppl = [math.exp(t.nll) for t in plain if t.nll is not None]
    base = {
        "perplexity": float(np.median(ppl)) if ppl else None,
        "near_empty": float(np.mean([is_near_empty(t.text) for t in plain])),
        "distinct_2": _distinct_2(plain),
    }
    arms = sorted({t.arm for t in texts if t.sign != 0}, key=lambda a: (a != CONCEPT_ARM, a))
    steps = [
        _step(b, s, a, [t for t in texts if (t.beta, t.sign, t.arm) == (b, s, a)], base, limits)
        for b in sorted(grid)
        for s in SIGNS
        for a in arms
    ]
    ok = {b: all(st.coherent for st in steps if st.beta == b) for b in sorted(grid)}
    low = high = None
    for beta in sorted(grid):
        if ok[beta] and low is None:
            low = high = beta
        elif ok[beta] and low is not None:
            high = beta
        elif low is not None:
            break
    return base, steps, low, high


def calibrate_strength(
    config: ExperimentConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    layer: int,
    grid: Sequence[float] = DEFAULT_GRID,
    limits: StrengthLimits | None = None,
    progress: Callable[[int, int], None] | None = None,
    say: Callable[[str], None] = lambda _msg: None,
) -> tuple[StrengthRange, Path]:
    """Sweep β at ``layer`` with ``graph``'s concepts and record the range in the
    classifier folder (trained first when missing): (the record, its path). The sweep is
    an MLflow run of ``strength-sweeps`` (``strength/publish.py``): KILLED on Ctrl-C, FAILED
    on an error, FINISHED with its range, table, texts and figure."""
    if config.steering.mode != "additive":
        raise ConfigError(
            "steering.mode projection has no β (it steers by s alone); the strength sweep "
            "is for steering.mode additive"
        )
    limits = limits or StrengthLimits()
    started = time.perf_counter()
    layer = lm.check_layer(layer)
    say(f"classifiers at layer {layer}")
    probes = ensure_classifiers(config, lm, graph, layer)
    swept = config.model_copy(
        update={"selection": config.selection.model_copy(update={"beta_grid": sorted(grid)})}
    )
    vectors = build_vectors(swept, lm, graph, probes, layer)
    directions = [c.synset for c in graph.concepts] + [
        f"{synset}|{random_arm(j)}" for synset, vs in vectors.random.items() for j in range(len(vs))
    ]

    def coefficient(name: str, beta: float, sign: int) -> float:
        return float(replace(vectors.get(name), beta=beta).coefficients(sign)[0])

    rows, meta = sweep_rows(swept, graph, directions, coefficient)
    g = config.generation
    sampling = SamplingConfig(g.max_new_tokens, g.temperature, g.top_p, g.greedy)
    spec = PlanSpec(
        directions=vectors.stacked(directions), layer=layer, mode="additive", sampling=sampling
    )
    partial = probes.directory / PARTIAL_FILE
    identity = sweep_identity(lm.probe_id, layer, sampling, rows)
    earlier_run, done = resume_partial(partial, identity)
    todo = [row for row in rows if row.key not in done]
    if done:
        say(f"resuming the stopped sweep (run {earlier_run}): {len(done)}/{len(rows)} texts kept")
    say(f"generating {len(todo)} texts: {len(grid)} βs at s = ±1, unsteered; α {vectors.alpha:.4g}")
    work = batches(todo, lm, batch_rows(config, lm, todo)) if todo else []
    tags = {"phase": PHASE, MODEL_TAG: lm.model_id}  # as every run: the loaded model's id
    name = run_name(lm.probe_id, layer, config.steering.vector_source)
    with tracking.tracked_run(STRENGTH_EXPERIMENT, name, tags=tags, run_id=earlier_run) as run_id:
        if earlier_run is None:
            append_jsonl(
                partial, [{"format": PARTIAL_FORMAT, "identity": identity, "run_id": run_id}]
            )
        for index, batch in enumerate(work):
            result = run_batch(lm, spec, index, batch)
            made = [
                {"key": gen.key, "text": gen.text, "nll": nll}
                for gen, nll in zip(result.generations, result.nll, strict=True)
            ]
            append_jsonl(partial, made)  # a finished batch survives a crash
            done.update({m["key"]: m for m in made})
            if progress is not None:
                progress(len(done), len(rows))
        texts = [  # in the rows' order, however the batches ran or resumed
            SweepText(*meta[r.key][:2], done[r.key]["text"], done[r.key]["nll"], meta[r.key][2])
            for r in rows
        ]
        base, steps, low, high = assess(texts, grid, limits)
        record = StrengthRange(
            model_id=lm.probe_id,
            layer=layer,
            mode=config.steering.mode,
            vector_source=config.steering.vector_source,
            alpha=vectors.alpha,
            grid=sorted(grid),
            concepts=[c.synset for c in graph.concepts],
            prompts=len(g.prompts),
            max_new_tokens=g.max_new_tokens,
            seed=config.seed,
            limits=limits,
            unsteered=base,
            steps=steps,
            low=low,
            high=high,
            beta=high,
            seconds=round(time.perf_counter() - started, 1),
            run_id=run_id,
        )
        path = save_range(probes.directory, record)
        publish_sweep(run_id, record, path, [asdict(t) for t in texts])
    partial.unlink()  # the sweep is whole: its texts are in the run's texts.json
    return record, path


def sweep_identity(model_id: str, layer: int, sampling: SamplingConfig, rows) -> str:
    """What a sweep's texts depend on: the model, layer, sampling and every row (key,
    prompt, seed, direction, coefficient; the coefficients carry β·α)."""
    data = {
        "model": model_id,
        "layer": layer,
        "sampling": asdict(sampling),
        "rows": [[r.key, r.prompt, r.seed, r.direction, r.coefficient] for r in rows],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def resume_partial(path: Path, identity: str) -> tuple[str | None, dict[str, dict]]:
    """(the MLflow run, the texts by key) of an interrupted sweep of this identity kept
    at ``path``; (None, {}) when there is none. The texts of another sweep (other βs,
    prompts or model), or of a run the store no longer has, are discarded."""
    records = read_jsonl(path)
    head = records[0] if records else {}
    run_id = head.get("run_id")
    usable = head.get("format") == PARTIAL_FORMAT and head.get("identity") == identity
    if usable:
        try:
            tracking.get_run(run_id)
        except LookupError:
            usable = False
    if not usable:
        path.unlink(missing_ok=True)
        return None, {}
    return run_id, {r["key"]: r for r in records[1:] if "key" in r}
