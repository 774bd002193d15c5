"""Stage: generations, the model's output for every planned row.

Each finished batch is appended to ``generations.jsonl`` (fsynced) with the text, its
token counts and its mean negative log-likelihood under the *unsteered* model, the one
score that needs a forward pass. Everything else is computed from the saved text by
the scoring stage, so metrics can change without regenerating.

The batches run on an executor (``experiments.execution``: this process, or a Ray
actor pool); either way this driver is the only writer of the file, appending each
batch as it comes back, so an interrupted run of either kind resumes the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from experiments.config import CPU_BATCH_ROWS, ExperimentConfig
from experiments.execution import ExecutionError, Executor, LocalExecutor, PlanSpec
from experiments.pipeline.plan import GenerationPlan
from experiments.pipeline.vectors import VectorSet
from experiments.rows import GenerationRecord
from experiments.rundir import RunDir
from experiments.timer import Timer
from steering.generation import BatchStats, Generation, GenerationRow, SamplingConfig
from steering.memory import decode_rows
from steering.models import LoadedModel


def batch_rows(config: ExperimentConfig, lm: LoadedModel, rows: list[GenerationRow]) -> int:
    """Rows per batch: ``generation.batch_size``, or for ``auto`` 96 on the CPU and on a
    card what its free memory holds for the longest prompt plus the new tokens."""
    size = config.generation.batch_size
    if isinstance(size, int):
        return size
    longest = max((len(lm.tokenizer(r.prompt)["input_ids"]) for r in rows), default=1)
    return decode_rows(lm, longest + config.generation.max_new_tokens, CPU_BATCH_ROWS)


def batches(rows: list[GenerationRow], lm: LoadedModel, size: int) -> list[list[GenerationRow]]:
    """Rows sorted by prompt length so each batch carries little padding (then by key, so
    a concept's rows stay together within a length). These batches are every executor's
    work items: a row's text can depend on its batch's padding, never on the worker."""
    lengths = {r.prompt: len(lm.tokenizer(r.prompt)["input_ids"]) for r in rows}
    ordered = sorted(rows, key=lambda r: (lengths[r.prompt], r.key))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def generation_record(meta: dict, gen: Generation, nll: float | None, tps: float) -> dict:
    """One line of ``generations.jsonl`` (:class:`~experiments.rows.GenerationRecord`)."""
    return GenerationRecord(
        key=gen.key,
        **meta,
        text=gen.text,
        n_prompt_tokens=gen.n_prompt_tokens,
        n_new_tokens=gen.n_new_tokens,
        stopped_at_eos=gen.stopped_at_eos,
        nll=nll,
        batch_tokens_per_second=tps,
    ).row()


def generate(
    config: ExperimentConfig,
    plan: GenerationPlan,
    vectors: VectorSet,
    lm: LoadedModel,
    run_dir: RunDir,
    timer: Timer,
    on_batch: Callable[[int, int], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
) -> BatchStats:
    """Generate every row not yet in ``generations.jsonl``; append as each batch ends.

    ``executor`` runs the batches (default: locally on ``lm``); ``lm``'s tokenizer plans
    them, so every executor runs the same batches and gives the same texts."""
    done = {r["key"] for r in run_dir.read_generations()}
    pending = plan.pending(done)
    base_prompts = {k: m["base_prompt"] for k, m in plan.meta.items() if "base_prompt" in m}
    g = config.generation
    spec = PlanSpec(
        directions=vectors.stacked(plan.directions),
        layer=vectors.layer,
        mode=config.steering.mode,
        sampling=SamplingConfig(g.max_new_tokens, g.temperature, g.top_p, g.greedy),
        base_prompts=base_prompts,
    )
    runner = executor if executor is not None else LocalExecutor(lm)
    totals = BatchStats()
    finished = len(plan.rows) - len(pending)
    try:
        size = batch_rows(config, lm, pending)
        for result in runner.run(spec, batches(pending, lm, size), on_step=on_step):
            for stage, seconds in result.timings.items():
                timer.add(stage, seconds)
            totals.add(result.stats)
            tps = result.stats.tokens_per_second
            run_dir.append_generations(
                generation_record(plan.meta[gen.key], gen, loss, tps)
                for gen, loss in zip(result.generations, result.nll, strict=True)
            )
            finished += len(result.rows)
            if on_batch:
                on_batch(finished, len(plan.rows))
    except ExecutionError as exc:
        raise ExecutionError(
            f"{exc}. {finished} of {len(plan.rows)} rows are saved in {run_dir.path}; "
            f"finish the run with `steer-eval run --resume {run_dir.run_id}`"
        ) from exc
    return totals
