"""The rows the bench generates, and its one door into the Phase 5 pipeline.

This is the only bench module that imports the Phase 5 pipeline
(``experiments.phase5``): the run lifecycle and its preparation, the row keys and
seeds, the batching, the plan, Δ scoring and ``run_phase5`` itself. When the pipeline
changes shape, only this module has to follow. The imports stay inside the functions, so
the end-to-end child times the pipeline's import like ``make run`` pays it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from steering.generation import Generation, GenerationRow
from steering.models import LoadedModel
from steering.sampling import SamplingConfig
from steering.vector import Mode, SteeringVector


@dataclass
class Workload:
    """The rows to generate, with everything needed to steer them either way."""

    rows: list[GenerationRow]
    directions: torch.Tensor  # [n_directions, hidden]; row.direction indexes it
    vectors: list[SteeringVector]  # vectors[row.direction]
    strengths: dict[str, float]  # row key -> strength s
    layer: int
    mode: Mode
    sampling: SamplingConfig
    batch_size: int
    seed: int = 0
    plan: Any = None  # the Phase 5 plan, when the rows come from one (scoring needs it)

    @property
    def n_concepts(self) -> int:
        return len({r.direction for r in self.rows})

    def with_tokens(self, max_new_tokens: int) -> Workload:
        return replace(self, sampling=replace(self.sampling, max_new_tokens=max_new_tokens))

    def describe(self) -> dict[str, Any]:
        return {
            "rows": len(self.rows),
            "concepts": self.n_concepts,
            "strengths": sorted(set(self.strengths.values())),
            "distinct_prompts": len({r.prompt for r in self.rows}),
            "layer": self.layer,
            "mode": self.mode,
            "max_new_tokens": self.sampling.max_new_tokens,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "greedy": self.sampling.greedy,
            "batch_size": self.batch_size,
        }


@dataclass
class BenchPlan:
    """What the bench needs of a Phase 5 plan to score its rows (section dtype): the rows'
    metadata, the scorer, α and the neutral texts' graph and seed."""

    config: Any
    graph: Any
    alpha: float
    row_meta: dict[str, dict[str, Any]]
    scorer: Any


def plan_workload(config: Any, lm: LoadedModel, embedder: Any) -> Workload:
    """The config's Phase 5 plan, built as a run builds it (the run lifecycle and
    ``pipeline.run.prepare``: classifiers trained or reused, vectors, centroids), without
    null-control or baseline rows: the bench times the seed's grid (the concept arm, as the
    seed's ``make run`` grid), exactly as the pipeline generates it. No MLflow run opens."""
    from experiments.kernel.lifecycle import open_run
    from experiments.kernel.plan import build_plan
    from experiments.phase5.run import prepare

    config = config.model_copy(
        update={
            "controls": config.controls.model_copy(
                update={"random_directions": 0, "prompt_baseline": False}
            )
        }
    )
    with open_run(config, lm=lm, embedder=embedder) as session:
        prep = prepare(session)
    plan = build_plan(config, session.graph, prep.vectors)
    if not isinstance(config.generation.batch_size, int):  # auto: as the generate stage sizes it
        from experiments.kernel.generate import batch_rows

        size = batch_rows(config, lm, plan.rows)
        config = config.model_copy(
            update={"generation": config.generation.model_copy(update={"batch_size": size})}
        )
    vectors = [prep.vectors.vectors[c.synset] for c in session.graph.concepts]
    g = config.generation
    return Workload(
        rows=list(plan.rows),
        directions=torch.stack([v.direction for v in vectors]),
        vectors=vectors,
        strengths={k: float(m["strength"]) for k, m in plan.meta.items()},
        layer=prep.layer,
        mode=config.steering.mode,
        sampling=SamplingConfig(g.max_new_tokens, g.temperature, g.top_p, g.greedy),
        batch_size=g.batch_size,
        seed=config.seed,
        plan=BenchPlan(config, session.graph, prep.vectors.alpha, plan.meta, prep.scorer),
    )


def scaled_workload(wl: Workload, n_concepts: int) -> tuple[Workload, str]:
    """The grid with ``n_concepts`` concepts: a prefix of the real ones, or, beyond them,
    the real concepts repeated with distinct seeds (more samples per prompt). Generation
    cost does not depend on which direction a row carries, only on rows x tokens."""
    from experiments.kernel.plan import row_seed

    real = sorted({r.direction for r in wl.rows})
    if n_concepts <= len(real):
        keep = set(real[:n_concepts])
        rows = [r for r in wl.rows if r.direction in keep]
        return replace(wl, rows=rows), f"the first {n_concepts} of the {len(real)} concepts"
    copies = math.ceil(n_concepts / len(real))
    rows, strengths = list(wl.rows), dict(wl.strengths)
    for k in range(1, copies):
        for r in wl.rows:
            if k * len(real) + real.index(r.direction) >= n_concepts:
                continue
            key = f"{r.key}|copy{k}"
            rows.append(replace(r, key=key, seed=row_seed(r.seed, "copy", k, 0)))
            strengths[key] = wl.strengths[r.key]
    how = (
        f"{len(real)} real concepts repeated {copies}x with distinct seeds "
        f"(samples_per_prompt={copies})"
    )
    return replace(wl, rows=rows, strengths=strengths), how


def stratified_subset(wl: Workload, n: int, seed: int = 0) -> list[GenerationRow]:
    """``n`` rows spread over the strengths (round-robin) and, at random, over concepts and
    prompts, in a fixed order."""
    groups: dict[float, list[GenerationRow]] = {}
    for r in wl.rows:
        groups.setdefault(wl.strengths[r.key], []).append(r)
    rng = random.Random(seed)
    shuffled = [rng.sample(g, len(g)) for _, g in sorted(groups.items())]
    picked: list[GenerationRow] = []
    for i in range(max(len(g) for g in shuffled)):
        for g in shuffled:
            if i < len(g) and len(picked) < n:
                picked.append(g[i])
    return picked


def batches_of(
    lm: LoadedModel, rows: Sequence[GenerationRow], size: int
) -> list[list[GenerationRow]]:
    """Rows sorted by prompt length, as ``make run`` batches them."""
    from experiments.kernel.generate import batches

    return batches(list(rows), lm, size)


def delta_by_strength(plan: Any, gens: Sequence[Generation]) -> dict[str, dict[str, float]]:
    """Δ per row (key -> Δ) and strength, scored exactly as Phase 5 scores it (by the plan's
    scorer, which holds the embedder it was built with)."""
    from experiments.kernel.score import score_chunk

    records = [
        {"key": g.key, "text": g.text, "prompt": g.prompt, **plan.row_meta[g.key]} for g in gens
    ]
    scores = score_chunk(plan.scorer, records)
    return {
        s["key"]: {"delta": s["delta"], "strength": plan.row_meta[s["key"]]["strength"]}
        for s in scores
    }


def neutral_texts(plan: Any) -> list[str]:
    """The plan's neutral texts, from which Phase 5 measures the residual scale α."""
    from experiments.kernel.vectors import neutral_texts as texts

    return texts(plan.graph, plan.config.seed)


def pipeline_entry() -> Callable[..., Any]:
    """``run_phase5(config, progress=...)``: the whole ``make run`` workload, whose result has
    ``timings`` (seconds by stage), ``tokens_per_second`` and ``records`` (one per row)."""
    from experiments.phase5.run import run_phase5

    return run_phase5
