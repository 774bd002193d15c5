"""steer-eval from Python: evaluate a model's steering vectors, read a run back.

    import steer_eval

    result = steer_eval.evaluate(model="embedded", vectors="vectors/happy.gguf",
                                 layers="file", coefficient=2.0)
    result.answer        # the typed verdicts (experiments.answer.Answer)
    result.samples       # the texts behind them, text first (a pandas DataFrame)
    result.run_id, result.run_dir, result.record, result.url, result.command
    steer_eval.load_run("latest")

A thin, documented door in front of the suite's packages (``experiments``, ``steering``,
``metrics``, ``judges``), which stay where they are: :func:`evaluate` is ``steer-eval
run`` (the same config, overrides and Study runner, so the same record and config hash
as its command line) and :func:`load_run` reads any finished Phase 5 run. Nothing heavy
is imported here (torch, transformers, MLflow load on the first call), so ``import
steer_eval`` is fast.
"""

from __future__ import annotations

from steer_eval.api import evaluate
from steer_eval.errors import ArgumentError
from steer_eval.result import Result, load_run
from steer_eval.vectors import ControlVectorLike

__all__ = ["ArgumentError", "ControlVectorLike", "Result", "evaluate", "load_run"]
