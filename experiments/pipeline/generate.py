"""Stage: generations, the model's output for every planned row.

Each finished batch is appended to ``generations.jsonl`` (fsynced) with the text, its
token counts and its mean negative log-likelihood under the *unsteered* model, the one
score that needs a forward pass. Everything else is computed from the saved text by
the scoring stage, so metrics can change without regenerating.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from experiments.config import ExperimentConfig
from experiments.pipeline.plan import GenerationPlan
from experiments.pipeline.timer import Timer
from experiments.pipeline.vectors import VectorSet
from experiments.rundir import RunDir
from steering.generation import (
    BatchStats,
    Generation,
    GenerationRow,
    SamplingConfig,
    continuation_nll,
    generate_batch,
)
from steering.models import LoadedModel


def batches(rows: list[GenerationRow], lm: LoadedModel, size: int) -> list[list[GenerationRow]]:
    """Rows sorted by prompt length so each batch carries little padding."""
    lengths = {r.prompt: len(lm.tokenizer(r.prompt)["input_ids"]) for r in rows}
    ordered = sorted(rows, key=lambda r: (lengths[r.prompt], r.key))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def unsteered_nll(
    lm: LoadedModel,
    batch: list[GenerationRow],
    gens: list[Generation],
    timer: Timer,
    base_prompts: dict[str, str] | None = None,
) -> list[float | None]:
    """Mean NLL of each continuation under the unsteered model given the *original*
    prompt. Unsteered rows already have it from sampling; steered rows, and rows steered
    by an instruction (``base_prompts``: key -> prompt without it), get a forward pass."""
    base = base_prompts or {}
    nll: list[float | None] = [None] * len(gens)
    steered = [
        i
        for i, r in enumerate(batch)
        if (r.coefficient != 0.0 or r.key in base) and gens[i].token_ids
    ]
    for i, r in enumerate(batch):
        if r.coefficient == 0.0 and r.key not in base and gens[i].logprobs:
            nll[i] = -float(np.mean(gens[i].logprobs))
    if steered:
        with timer.time("perplexity"):
            losses = continuation_nll(
                lm,
                [base.get(gens[i].key, gens[i].prompt) for i in steered],
                [gens[i].token_ids for i in steered],
            )
        for i, loss in zip(steered, losses, strict=True):
            nll[i] = loss
    return nll


def generation_record(meta: dict, gen: Generation, nll: float | None, tps: float) -> dict:
    return {
        "key": gen.key,
        **meta,
        "text": gen.text,
        "n_prompt_tokens": gen.n_prompt_tokens,
        "n_new_tokens": gen.n_new_tokens,
        "stopped_at_eos": gen.stopped_at_eos,
        "nll": nll,
        "batch_tokens_per_second": tps,
    }


def generate(
    config: ExperimentConfig,
    plan: GenerationPlan,
    vectors: VectorSet,
    lm: LoadedModel,
    run_dir: RunDir,
    timer: Timer,
    on_batch: Callable[[int, int], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> BatchStats:
    """Generate every row not yet in ``generations.jsonl``; append as each batch ends."""
    done = {r["key"] for r in run_dir.read_generations()}
    pending = plan.pending(done)
    directions = vectors.stacked(plan.directions)
    base_prompts = {k: m["base_prompt"] for k, m in plan.meta.items() if "base_prompt" in m}
    g = config.generation
    sampling = SamplingConfig(g.max_new_tokens, g.temperature, g.top_p, g.greedy)
    totals = BatchStats()
    finished = len(plan.rows) - len(pending)
    for batch in batches(pending, lm, g.batch_size):
        with timer.time("generation"):
            gens, stats = generate_batch(
                lm,
                batch,
                directions,
                vectors.layer,
                config.steering.mode,
                sampling,
                on_step=on_step,
            )
        totals.add(stats)
        nll = unsteered_nll(lm, batch, gens, timer, base_prompts)
        run_dir.append_generations(
            generation_record(plan.meta[gen.key], gen, loss, stats.tokens_per_second)
            for gen, loss in zip(gens, nll, strict=True)
        )
        finished += len(batch)
        if on_batch:
            on_batch(finished, len(plan.rows))
    return totals
