"""The Ray executor: an actor pool, one model per actor, batches streamed back.

Each actor loads the model once (``num_gpus=1`` when the model runs on CUDA) and gets
each plan's shared :class:`PlanSpec` once, through the object store; a work item is one
batch of rows, exactly the batch the local executor would run, so texts match it. The
driver keeps :data:`PIPELINE_DEPTH` batches queued per actor and yields results as they
finish; it alone writes the run folder and MLflow (workers never open the store).

Faults: a batch whose actor dies is queued again for a live actor, at most
``max_retries`` times per batch, each retry logged; the dead actor is dropped. When no
actor is left the plan stops with :class:`ExecutionError`; the driver then names
``--resume``, which finishes from what was written. ``import ray`` happens only here,
lazily, so the rest of the suite (and ``steer-eval --help``) never loads it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from experiments.execution.base import BatchResult, ExecutionError, PlanSpec
from experiments.execution.local import run_batch
from steering.generation import GenerationRow
from steering.models import ModelSpec

log = logging.getLogger(__name__)

# Batches queued per actor: one running and one waiting hides the round trip to the driver.
PIPELINE_DEPTH = 2
# Settings a worker needs to find the same offline assets as the driver.
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "STEER_EVAL_CACHE")


def import_ray() -> ModuleType:
    """The ``ray`` module, or a clear error saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ExecutionError(
            "execution.executor is ray but Ray is not installed (it is an extra): "
            "make setup-ray, or pip install -e '.[ray]' (or use --executor local)"
        ) from exc
    module: ModuleType = ray
    return module


class GenerationWorker:
    """One actor's state: the model, loaded once, and the current plan's spec."""

    def __init__(self, source: ModelSpec, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.lm = source.load()
        self.plan_id: int | None = None
        self.spec: PlanSpec | None = None
        self.label = f"{socket.gethostname()}:{os.getpid()}"

    def info(self) -> dict[str, Any]:
        """The process id (the kill test aims at it), host, device and torch threads."""
        import torch

        return {
            "pid": os.getpid(),
            "label": self.label,
            "device": str(self.lm.device),
            "threads": torch.get_num_threads(),
        }

    def set_plan(self, plan_id: int, spec: PlanSpec) -> None:
        self.plan_id, self.spec = plan_id, spec

    def run(self, plan_id: int, index: int, rows: list[GenerationRow]) -> BatchResult:
        if plan_id != self.plan_id or self.spec is None:
            raise RuntimeError(f"batch of plan {plan_id} sent to a worker holding {self.plan_id}")
        return run_batch(self.lm, self.spec, index, rows, worker=self.label)


def _forwarded_env(local: bool) -> dict[str, str]:
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    if local:  # the same machine: the driver's cache, wherever the worker starts
        from steering.assets import cache_dir

        env["STEER_EVAL_CACHE"] = str(cache_dir())
    return env


class RayExecutor:
    """A pool of ``workers`` actors on a local Ray instance or the cluster at ``address``."""

    name = "ray"

    def __init__(
        self,
        source: ModelSpec,
        workers: int = 2,
        cpus_per_worker: float = 1.0,
        max_retries: int = 2,
        address: str | None = None,
        threads: int | None = None,
    ) -> None:
        self.source = source
        self.workers = workers
        self.cpus_per_worker = cpus_per_worker
        # torch threads per actor: the driver passes its own count (make_executor), since
        # fp32 attention on the CPU gives other last bits at another count.
        self.threads = threads or max(1, round(cpus_per_worker))
        self.max_retries = max_retries
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.retries = 0
        self.deaths = 0
        self.start_seconds = 0.0
        self._actors: list[Any] = []
        self._info: dict[int, dict[str, Any]] = {}
        self._live: list[int] = []
        self._started_ray = False
        self._plans = 0

    # ------------------------------------------------------------------ the pool

    def _init_ray(self, ray: ModuleType) -> None:
        if ray.is_initialized():
            return  # the caller's instance (a test, a notebook): theirs to shut down
        if self.address:
            import experiments
            import steering

            modules = [str(Path(cast(str, m.__file__)).parent) for m in (experiments, steering)]
            runtime_env = {"py_modules": modules, "env_vars": _forwarded_env(local=False)}
            ray.init(address=self.address, runtime_env=runtime_env, log_to_driver=False)
        else:
            ray.init(
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": _forwarded_env(local=True)},
            )
        self._started_ray = True

    def _gpus(self, ray: ModuleType) -> int:
        """One per actor when the model runs on CUDA (``auto``: when the cluster has one)."""
        if self.source.device == "auto":
            return 1 if ray.cluster_resources().get("GPU", 0) > 0 else 0
        return 1 if self.source.device.startswith("cuda") else 0

    def start(self) -> RayExecutor:
        """Start Ray if needed and the actors, and wait until each has loaded the model."""
        if self._actors:
            return self
        import time

        began = time.perf_counter()
        ray = import_ray()
        self._init_ray(ray)
        gpus = self._gpus(ray)
        have = ray.cluster_resources()
        for resource, each in (("CPU", self.cpus_per_worker), ("GPU", gpus)):
            if each and have.get(resource, 0) < each * self.workers:
                raise ExecutionError(
                    f"{self.workers} Ray workers need {each * self.workers:g} {resource} but the "
                    f"cluster has {have.get(resource, 0):g}: lower execution.workers or "
                    "execution.cpus_per_worker"
                )
        threads = self.threads
        actor = ray.remote(GenerationWorker).options(
            num_cpus=self.cpus_per_worker, num_gpus=gpus, max_restarts=0, max_task_retries=0
        )
        self._actors = [actor.remote(self.source, threads) for _ in range(self.workers)]
        try:
            infos = ray.get([a.info.remote() for a in self._actors])
        except ray.exceptions.RayActorError as exc:
            self.close()
            raise ExecutionError(
                f"a Ray worker could not load model {self.source.spec!r}: {exc}"
            ) from exc
        self._info = dict(enumerate(infos))
        self._live = list(range(self.workers))
        self.start_seconds = time.perf_counter() - began
        log.info(
            "%d Ray workers up in %.1f s: %s",
            self.workers,
            self.start_seconds,
            ", ".join(f"{i['label']} ({i['device']})" for i in infos),
        )
        return self

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for the fault tests)."""
        return [self._info[i]["pid"] for i in self._live]

    def _bury(self, ray: ModuleType, slot: int, exc: BaseException) -> None:
        if slot not in self._live:
            return
        self._live.remove(slot)
        self.deaths += 1
        log.warning(
            "Ray worker %s died (%s); %d of %d workers left",
            self._info[slot]["label"],
            type(exc).__name__,
            len(self._live),
            self.workers,
        )
        ray.kill(self._actors[slot], no_restart=True)

    # ------------------------------------------------------------------ running a plan

    def run(
        self,
        spec: PlanSpec,
        batches: Sequence[list[GenerationRow]],
        on_step: Callable[[int, int], None] | None = None,
    ) -> Iterator[BatchResult]:
        """Yield every batch's result in completion order; ``on_step`` is not forwarded
        (per-token progress stays in the workers)."""
        if not batches:
            return
        self.start()
        ray = import_ray()
        from ray.exceptions import ActorUnavailableError, RayActorError

        self._plans += 1
        plan_id = self._plans
        spec_ref = ray.put(spec)
        for slot in self._live:
            self._actors[slot].set_plan.remote(plan_id, spec_ref)
        queue = deque(range(len(batches)))
        attempts: Counter[int] = Counter()
        load: Counter[int] = Counter()
        in_flight: dict[Any, tuple[int, int]] = {}
        finished = 0
        while queue or in_flight:
            for slot in list(self._live):
                while queue and load[slot] < PIPELINE_DEPTH:
                    index = queue.popleft()
                    ref = self._actors[slot].run.remote(plan_id, index, batches[index])
                    in_flight[ref] = (slot, index)
                    load[slot] += 1
            if not in_flight:
                raise ExecutionError(
                    f"all {self.workers} Ray workers died; {finished} of {len(batches)} "
                    "batches of this plan finished and are saved"
                )
            [ref], _ = ray.wait(list(in_flight), num_returns=1)
            slot, index = in_flight.pop(ref)
            load[slot] -= 1
            try:
                result = ray.get(ref)
            except (RayActorError, ActorUnavailableError) as exc:
                self._bury(ray, slot, exc)
                attempts[index] += 1
                self.retries += 1
                if attempts[index] > self.max_retries:
                    raise ExecutionError(
                        f"batch {index} lost its worker {attempts[index]} times "
                        f"(execution.max_retries is {self.max_retries}); {finished} of "
                        f"{len(batches)} batches of this plan finished and are saved"
                    ) from exc
                log.warning(
                    "retrying batch %d of %d (%d rows) on another worker: attempt %d of %d",
                    index,
                    len(batches),
                    len(batches[index]),
                    attempts[index] + 1,
                    self.max_retries + 1,
                )
                queue.appendleft(index)
                continue
            finished += 1
            yield result

    def close(self) -> None:
        """Stop the actors, and Ray itself when this executor started it."""
        if not self._actors and not self._started_ray:
            return
        ray = import_ray()
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors, self._live = [], []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
