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
run takes its top (``experiments/strength_range.py``), where the strongest steering that
still reads as text is.

The sweep is a study (:class:`StrengthSweep`, run by ``kernel/study.run_study``) of a
Phase 5 config with runs of its own: the MLflow experiment ``strength-sweeps`` and the
folders ``strength/<run id>/`` beside the config's results folder (``results/strength``
for ``results/phase5``). Its texts are appended per batch to the run folder
(``RunDir.SWEEP_TEXTS``); a pointer beside the classifiers (:data:`POINTER_FILE`) names
the sweep in progress there by its identity (:func:`sweep_identity`) and run, so the
same command resumes a stopped sweep into the same run (:func:`stopped_sweep`). Its
record goes to the run folder when it is published, and to the classifier folder
(``save_range``) once the run has ended FINISHED, where later runs look it up.
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
from experiments.config import ConfigError, Phase, Phase5Config
from experiments.execution.base import PlanSpec
from experiments.execution.local import run_batch
from experiments.kernel.classifiers import ensure_classifiers
from experiments.kernel.generate import batch_rows, batches
from experiments.kernel.lifecycle import RunSession
from experiments.kernel.plan import CONCEPT_ARM, random_arm, row_key, row_seed
from experiments.kernel.publisher import ChildRun, Views
from experiments.kernel.study import Begun, Finished, Opening, Resume, run_study
from experiments.kernel.vectors import build_vectors
from experiments.prompts import render_generation_prompts
from experiments.rundir import RunDir, append_jsonl, atomic_write_text, read_jsonl
from experiments.strength import publish
from experiments.strength_range import (
    RANGE_FILE,
    StrengthLimits,
    StrengthRange,
    StrengthStep,
    Unsteered,
    save_range,
    thin_warnings,
)
from metrics.text import distinct_n, is_near_empty
from steering.generation import GenerationRow, SamplingConfig
from steering.models import LoadedModel

# From "no visible change" to well past the 270M's collapse (|β·s| = 0.3); SmolLM2 135M
# stays coherent to 0.5.
DEFAULT_GRID = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
# The sweep in progress in a classifier folder: its identity and MLflow run, so the same
# command resumes a stopped sweep into its run; removed once the range is recorded.
POINTER_FILE = "strength_sweep.run.json"
POINTER_FORMAT = "steer-eval/strength-sweep-run"
IDENTITY_TAG = "strength.identity"  # the run's tag: what its texts depend on
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
    config: Phase5Config,
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
    base: Unsteered,
    limits: StrengthLimits,
) -> StrengthStep:
    ppl = [math.exp(t.nll) for t in texts if t.nll is not None]
    multiple = float(np.median(ppl)) / base.perplexity if ppl and base.perplexity else None
    near_empty = float(np.mean([is_near_empty(t.text) for t in texts]))
    d2 = _distinct_2(texts)
    why = []
    if multiple is None or multiple > limits.perplexity_multiple:
        why.append(f"perplexity multiple above {limits.perplexity_multiple:g}")
    # one text of slack: a sweep has few texts per β (9 by default), and one more empty
    # text than the unsteered ones is sampling, not collapse
    if near_empty > base.near_empty + limits.near_empty_excess + 1 / len(texts):
        why.append(f"near-empty share more than {limits.near_empty_excess:g} above unsteered")
    if d2 < limits.distinct_2_ratio * base.distinct_2:
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
) -> tuple[Unsteered, list[StrengthStep], float | None, float | None]:
    """(the unsteered measures, one step per β, sign and arm, low, high): a β is coherent
    when every sign and arm is; the range is the first coherent β and every coherent one
    after it up to the first that is not."""
    plain = [t for t in texts if t.sign == 0]
    if not plain:
        raise ValueError("the sweep needs unsteered texts (sign 0) to measure against")
    ppl = [math.exp(t.nll) for t in plain if t.nll is not None]
    base = Unsteered(
        perplexity=float(np.median(ppl)) if ppl else None,
        near_empty=float(np.mean([is_near_empty(t.text) for t in plain])),
        distinct_2=_distinct_2(plain),
    )
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
        if ok[beta]:
            low, high = beta if low is None else low, beta
        elif low is not None:
            break
    return base, steps, low, high


def results_root(config: Phase5Config) -> Path:
    """Where sweeps' run folders are written: ``strength/`` beside the config's results
    folder (``results/strength`` for ``results/phase5``)."""
    return Path(config.results_dir).parent / "strength"


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep generates, fixed before its run opens: its identity tells whether a
    stopped sweep of the same texts is there to resume."""

    config: Phase5Config  # the swept config: the grid and layer as swept
    model_id: str  # the probe id
    directory: Path  # the classifier folder: where the range is kept
    layer: int
    alpha: float
    concepts: list[str]
    rows: list[GenerationRow]
    meta: dict[str, tuple[float, int, str]]  # key -> (β, sign, arm)
    spec: PlanSpec
    identity: str


def plan_sweep(
    config: Phase5Config,
    lm: LoadedModel,
    graph: ConceptGraph,
    layer: int,
    grid: Sequence[float],
    say: Callable[[str], None] = lambda _msg: None,
) -> SweepPlan:
    """The classifiers at ``layer`` (trained first when missing), the vectors, and every
    row the sweep generates."""
    if config.steering.mode != "additive":
        raise ConfigError(
            "steering.mode projection has no β (it steers by s alone); the strength sweep "
            "is for steering.mode additive"
        )
    if config.steering.layers != "auto" or config.steering.scale != "unit":
        raise ConfigError(
            "the strength sweep varies β at one layer; steering.layers and steering.scale "
            "file steer a vector file as deployed (its layers, its norms × coefficient): "
            "leave them at auto and unit to sweep"
        )
    layer = lm.check_layer(layer)
    say(f"classifiers at layer {layer}")
    probes = ensure_classifiers(config, lm, graph, layer)
    swept = config.model_copy(
        update={
            "layer": layer,
            "selection": config.selection.model_copy(update={"beta_grid": sorted(grid)}),
        }
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
    return SweepPlan(
        swept,
        lm.probe_id,
        probes.directory,
        layer,
        vectors.alpha,
        [c.synset for c in graph.concepts],
        rows,
        meta,
        spec,
        sweep_identity(lm.probe_id, layer, sampling, rows),
    )


class StrengthSweep:
    """The strength sweep of a prepared plan (a :class:`~experiments.kernel.study.Study`
    of a Phase 5 config): new, or resumed from the texts its run folder holds."""

    phase: Phase = "phase5"
    record_file: str = RANGE_FILE

    def __init__(
        self,
        plan: SweepPlan,
        limits: StrengthLimits,
        since: float,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.plan = plan
        self.limits = limits
        self.since = since  # perf_counter at the command's start: the record's seconds
        self.progress = progress

    def begin(self, session: RunSession[Phase5Config]) -> Begun[None]:
        plan = self.plan
        source = plan.config.steering.vector_source
        opening = Opening(
            publish.run_name(plan.model_id, plan.layer, source),
            {"phase": publish.PHASE, IDENTITY_TAG: plan.identity},
            publish.STRENGTH_EXPERIMENT,
            results_root(plan.config),
        )
        return Begun(opening, None)  # the plan was prepared before the session

    def started(
        self, session: RunSession[Phase5Config], new: bool, prepared: None
    ) -> dict[str, object]:
        plan = self.plan
        if new:  # the same command finds this run from here until the range is recorded
            pointer = {"format": POINTER_FORMAT, "identity": plan.identity}
            atomic_write_text(
                plan.directory / POINTER_FILE, json.dumps({**pointer, "run_id": session.run_id})
            )
        grid = plan.config.selection.beta_grid
        return publish.sweep_params(
            plan.model_id, plan.layer, plan.config, grid, plan.concepts, self.limits
        )

    def stages(
        self, session: RunSession[Phase5Config], prepared: None
    ) -> Finished[StrengthRange, list[SweepText]]:
        plan, lm, say = self.plan, session.model, session.say
        config, rows = plan.config, plan.rows
        path = session.directory.file(RunDir.SWEEP_TEXTS)
        done = {r["key"]: r for r in read_jsonl(path) if "key" in r}
        todo = [row for row in rows if row.key not in done]
        grid = config.selection.beta_grid
        if done:
            say(
                f"resuming the stopped sweep (run {session.run_id}): "
                f"{len(done)}/{len(rows)} texts kept"
            )
        say(
            f"generating {len(todo)} texts: {len(grid)} βs at s = ±1, unsteered; α {plan.alpha:.4g}"
        )
        with session.timer.time("generation"):
            work = batches(todo, lm, batch_rows(config, lm, todo)) if todo else []
            for index, batch in enumerate(work):
                result = run_batch(lm, plan.spec, index, batch)
                made = [
                    {"key": gen.key, "text": gen.text, "nll": nll}
                    for gen, nll in zip(result.generations, result.nll, strict=True)
                ]
                append_jsonl(path, made)  # a finished batch survives a crash
                done.update({m["key"]: m for m in made})
                if self.progress is not None:
                    self.progress(len(done), len(rows))
        meta = plan.meta
        texts = [  # in the rows' order, however the batches ran or resumed
            SweepText(*meta[r.key][:2], done[r.key]["text"], done[r.key]["nll"], meta[r.key][2])
            for r in rows
        ]
        base, steps, low, high = assess(texts, grid, self.limits)
        g = config.generation
        record = StrengthRange(
            model_id=plan.model_id,
            layer=plan.layer,
            mode=config.steering.mode,
            vector_source=config.steering.vector_source,
            alpha=plan.alpha,
            grid=sorted(grid),
            concepts=plan.concepts,
            prompts=len(g.prompts),
            max_new_tokens=g.max_new_tokens,
            seed=config.seed,
            limits=self.limits,
            unsteered=base,
            steps=steps,
            low=low,
            high=high,
            beta=high,
            seconds=round(time.perf_counter() - self.since, 1),
            run_id=session.run_id,
        )
        record.warnings = thin_warnings(record)
        return Finished(record, texts)

    def views(self, record: StrengthRange, products: list[SweepText]) -> Views:
        kept = self.plan.directory / RANGE_FILE
        return publish.views(record, [asdict(t) for t in products], kept)

    def children(self, record: StrengthRange, products: list[SweepText]) -> list[ChildRun]:
        return []


def calibrate_strength(
    config: Phase5Config,
    lm: LoadedModel,
    graph: ConceptGraph,
    layer: int,
    grid: Sequence[float] = DEFAULT_GRID,
    limits: StrengthLimits | None = None,
    progress: Callable[[int, int], None] | None = None,
    say: Callable[[str], None] = lambda _msg: None,
) -> tuple[StrengthRange, Path]:
    """Sweep β at ``layer`` with ``graph``'s concepts and record the range in the
    classifier folder (trained first when missing): (the record, its path there). The
    sweep is a run of ``strength-sweeps`` (:class:`StrengthSweep` through ``run_study``):
    KILLED on Ctrl-C with no range recorded, FAILED on an error, FINISHED with its range,
    table, texts and figure; a stopped sweep of the same texts resumes into its run."""
    started = time.perf_counter()
    plan = plan_sweep(config, lm, graph, layer, grid, say)
    earlier = stopped_sweep(plan.directory, plan.identity)
    study = StrengthSweep(plan, limits or StrengthLimits(), started, progress)
    ran = run_study(
        study,
        None if earlier else plan.config,
        resume=Resume(earlier) if earlier else None,
        lm=lm,
        progress=say,
        need_embedder=False,
    )
    path = save_range(plan.directory, ran.record)
    (plan.directory / POINTER_FILE).unlink(missing_ok=True)  # the sweep is whole
    return ran.record, path


def sweep_identity(
    model_id: str, layer: int, sampling: SamplingConfig, rows: Sequence[GenerationRow]
) -> str:
    """What a sweep's texts depend on: the model, layer, sampling and every row (key,
    prompt, seed, direction, coefficient; the coefficients carry β·α)."""
    data = {
        "model": model_id,
        "layer": layer,
        "sampling": asdict(sampling),
        "rows": [[r.key, r.prompt, r.seed, r.direction, r.coefficient] for r in rows],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def stopped_sweep(directory: Path, identity: str) -> str | None:
    """The MLflow run of a stopped sweep of this identity in the classifier folder
    ``directory`` (its pointer, :data:`POINTER_FILE`), or None. A pointer to another
    sweep (other βs, prompts or model), to a run the store no longer has or to a run
    whose folder is gone is removed: the sweep starts a run of its own."""
    pointer = Path(directory) / POINTER_FILE
    if not pointer.exists():
        return None
    try:
        head = json.loads(pointer.read_text(encoding="utf-8"))
    except ValueError:
        head = {}
    run_id = head.get("run_id") if isinstance(head, dict) else None
    if (
        isinstance(run_id, str)
        and head.get("format") == POINTER_FORMAT
        and head.get("identity") == identity
        and _folder_kept(run_id)
    ):
        return run_id
    pointer.unlink(missing_ok=True)
    return None


def _folder_kept(run_id: str) -> bool:
    """Whether the store has the run and its folder is still here."""
    try:
        return RunDir.locate(tracking.get_run(run_id)).file(RunDir.CONFIG).exists()
    except LookupError:
        return False
