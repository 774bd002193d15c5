"""Executors for the generation stage: ``local`` (this process) or ``ray`` (an actor pool).

:func:`make_executor` picks one from ``execution.executor``; the driver code in
``experiments.kernel.generate`` is the same for both (see :mod:`.base`).
"""

from __future__ import annotations

from experiments.config import RunConfig
from experiments.execution.base import BatchResult, ExecutionError, Executor, PlanSpec
from experiments.execution.local import LocalExecutor
from steering.models import LoadedModel


def make_executor(config: RunConfig, lm: LoadedModel, address: str | None = None) -> Executor:
    """The executor ``config.execution`` asks for; ``lm`` is the driver's model (local)."""
    e = config.execution
    if e.executor == "local":
        return LocalExecutor(lm)
    from experiments.execution.ray import RayExecutor

    return RayExecutor(
        config.model_spec,
        workers=e.workers,
        cpus_per_worker=e.cpus_per_worker,
        threads=e.torch_threads or lm.platform.torch_threads,  # the local run's numbers
        max_retries=e.max_retries,
        address=address,
    )


__all__ = [
    "BatchResult",
    "ExecutionError",
    "Executor",
    "LocalExecutor",
    "PlanSpec",
    "make_executor",
]
