"""The executor interface of the generation stage: row batches in, results out.

The driver (``experiments.kernel.generate``) plans the batches and is the only writer
of the run folder and of MLflow; an executor only turns batches into texts and NLLs.
Results come back in completion order, so a driver can append each one as it lands; a
row's text depends on its own seed and its batch, never on which worker ran it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from steering.generation import BatchStats, Generation, GenerationRow
from steering.sampling import SamplingConfig
from steering.vector import Layers, Mode


class ExecutionError(RuntimeError):
    """The workers could not finish a plan; what was written stays, a resume finishes it."""


@dataclass(frozen=True)
class PlanSpec:
    """What every batch of one plan shares; a worker receives it once per plan, not per
    batch (the directions tensor is the one large piece)."""

    directions: torch.Tensor | None  # [n, hidden], or [n, len(layer), hidden]
    layer: Layers  # the steered layer, or layers (steering.vector.steer_layers)
    mode: Mode
    sampling: SamplingConfig
    base_prompts: dict[str, str] = field(default_factory=dict)


@dataclass
class BatchResult:
    """One finished batch: its rows, their generations and unsteered NLLs, its stats."""

    index: int
    rows: list[GenerationRow]
    generations: list[Generation]
    nll: list[float | None]
    stats: BatchStats
    timings: dict[str, float] = field(default_factory=dict)
    worker: str = "local"
    # when the batch's generation started and ended (Unix ns, the worker's clock): every
    # row of a batch is generated together, so these are each row's trace span times
    started_ns: int | None = None
    ended_ns: int | None = None


class Executor(Protocol):
    """Runs the batches of a plan and yields each :class:`BatchResult` as it finishes."""

    name: str
    retries: int  # batches re-run because their worker died

    def run(
        self,
        spec: PlanSpec,
        batches: Sequence[list[GenerationRow]],
        on_step: Callable[[int, int], None] | None = None,
    ) -> Iterator[BatchResult]: ...

    def close(self) -> None: ...
