"""Wall time per stage, reported in the run record and by ``make bench``; below the
pipeline and the executors, which both add to it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Timer:
    stages: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def time(self, name: str) -> Iterator[None]:
        """Add the block's wall time to stage ``name`` (stages accumulate over batches)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - start

    def add(self, name: str, seconds: float) -> None:
        """Add time measured elsewhere (a worker's batch) to stage ``name``."""
        self.stages[name] = self.stages.get(name, 0.0) + seconds
