"""The local executor: every batch in this process, in plan order (the suite's default).

:func:`run_batch` is the one piece of per-batch work, shared with the Ray actors so a
batch gives the same texts wherever it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from experiments.execution.base import BatchResult, PlanSpec
from experiments.timer import Timer
from steering.generation import Generation, GenerationRow, continuation_nll, generate_batch
from steering.models import LoadedModel
from steering.suffix import supports_suffix
from steering.vector import Layers, lowest_layer

if TYPE_CHECKING:
    import torch


def is_unsteered(row: GenerationRow, base_prompts: dict[str, str] | None) -> bool:
    """No vector and no instruction: the row's own sampling log-probs are its NLL."""
    return row.coefficient == 0.0 and row.key not in (base_prompts or {})


def unsteered_nll(
    lm: LoadedModel,
    batch: list[GenerationRow],
    gens: list[Generation],
    timer: Timer,
    base_prompts: dict[str, str] | None = None,
    states: list[torch.Tensor | None] | None = None,
    layer: Layers | None = None,
) -> list[float | None]:
    """Mean NLL of each continuation under the unsteered model given the *original*
    prompt. Unsteered rows already have it from sampling; steered rows, and rows steered
    by an instruction (``base_prompts``: key -> prompt without it), get a forward pass,
    from the layer above ``layer`` (the lowest of several) when generation captured the
    rows' unsteered ``states`` there (a row steered by an instruction has none: its
    prompt differs)."""
    base = base_prompts or {}
    nll: list[float | None] = [None] * len(gens)
    steered = [i for i, r in enumerate(batch) if not is_unsteered(r, base) and gens[i].token_ids]
    for i, r in enumerate(batch):
        if is_unsteered(r, base) and gens[i].logprobs:
            nll[i] = -float(np.mean(gens[i].logprobs))
    if steered:
        with timer.time("perplexity"):
            kept = None
            if states is not None and layer is not None:
                kept = [None if gens[i].key in base else states[i] for i in steered]
            losses = continuation_nll(
                lm,
                [base.get(gens[i].key, gens[i].prompt) for i in steered],
                [gens[i].token_ids for i in steered],
                states=kept,
                from_layer=None if kept is None or layer is None else lowest_layer(layer) + 1,
            )
        for i, loss in zip(steered, losses, strict=True):
            nll[i] = loss
    return nll


def run_batch(
    lm: LoadedModel,
    spec: PlanSpec,
    index: int,
    rows: list[GenerationRow],
    on_step: Callable[[int, int], None] | None = None,
    worker: str = "local",
) -> BatchResult:
    """Generate one batch and its unsteered NLLs; the stage times travel with the result."""
    timer = Timer()
    started_ns = time.time_ns()
    # On the CPU the decode keeps each row's residual stream at the steered layer, so the
    # perplexity pass runs only the layers above it (steering/suffix.py); a CUDA graph
    # replays its step without Python hooks, so a card runs the whole pass.
    states: list[torch.Tensor | None] | None = (
        [] if lm.device.type == "cpu" and supports_suffix(lm) else None
    )
    with timer.time("generation"):
        gens, stats = generate_batch(
            lm,
            rows,
            spec.directions,
            spec.layer,
            spec.mode,
            spec.sampling,
            on_step=on_step,
            logprobs_for=[is_unsteered(r, spec.base_prompts) for r in rows],
            layer_states=states,
        )
    ended_ns = time.time_ns()
    nll = unsteered_nll(lm, rows, gens, timer, spec.base_prompts, states, spec.layer)
    return BatchResult(
        index, list(rows), gens, nll, stats, dict(timer.stages), worker, started_ns, ended_ns
    )


class LocalExecutor:
    """Today's loop: one batch after another on the driver's own model."""

    name = "local"

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.retries = 0

    def run(
        self,
        spec: PlanSpec,
        batches: Sequence[list[GenerationRow]],
        on_step: Callable[[int, int], None] | None = None,
    ) -> Iterator[BatchResult]:
        for index, rows in enumerate(batches):
            yield run_batch(self.lm, spec, index, rows, on_step)

    def close(self) -> None:
        """Nothing to release: the model belongs to the caller."""
