"""Run Phase 5 on the tiny random Gemma and SIGKILL this process in one stage.

Used by ``test_kill_and_resume.py`` as a child process:

    python kill_harness.py <stage> <config.yaml> <torch threads>

The MLflow store comes from ``MLFLOW_TRACKING_URI``. Each stage arms one kill point by
wrapping a function of the suite where the stage calls it (fault injection; the
pipeline's own code runs unchanged up to the kill):

* ``generation``: the second batch's append writes half a JSON line, then dies (a torn
  last line in ``generations.jsonl``);
* ``scoring``: the atomic write of ``scores.jsonl`` leaves its temporary file half written;
* ``child_runs``: the third child run is created, then the process dies (RUNNING, empty);
* ``traces``: the second chunk of traces is logged, then dies before ``traces.json``
  lists it;
* ``publish``: dies when the figures are drawn (record, summary and criteria written;
  nothing mirrored to MLflow yet).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

STAGES = ("generation", "scoring", "child_runs", "traces", "publish", "evaluation")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(stage: str) -> None:
    if stage == "generation":
        import experiments.rundir as rundir

        append, calls = rundir.append_jsonl, []

        def torn_append(path, records):
            calls.append(path)
            if len(calls) < 2:
                return append(path, records)
            line = json.dumps(next(iter(records)))
            with path.open("a", encoding="utf-8") as handle:
                handle.write(line[: len(line) // 2])
                handle.flush()
                os.fsync(handle.fileno())
            die()

        rundir.append_jsonl = torn_append
    elif stage == "scoring":
        import experiments.rundir as rundir

        write = rundir.atomic_write_text

        def half_written(path, text, encoding="utf-8"):
            if path.name != rundir.RunDir.SCORES:
                return write(path, text, encoding)
            path.with_name(f".{path.name}.killed.tmp").write_text(text[: len(text) // 2])
            die()

        rundir.atomic_write_text = half_written
    elif stage == "child_runs":
        from experiments import tracking

        opened, children = tracking.tracked_run, []

        @contextlib.contextmanager
        def dies_in_the_third(*args, **kwargs):
            with opened(*args, **kwargs) as run_id:
                if kwargs.get("parent_run_id"):
                    children.append(run_id)
                    if len(children) == 3:
                        die()
                yield run_id

        tracking.tracked_run = dies_in_the_third
    elif stage == "traces":
        import experiments.tracking.traces as traces

        traces.CHUNK = 10
        write_map, chunks = traces.write_map, []

        def dies_before_the_second_map(path, mapping):
            chunks.append(len(mapping))
            if len(chunks) == 2:
                die()
            return write_map(path, mapping)

        traces.write_map = dies_before_the_second_map
    elif stage == "publish":
        import experiments.phase5.report as report

        def dies_drawing(*_args, **_kwargs):
            die()

        report.plots = dies_drawing
    elif stage == "evaluation":  # the evaluation run open, its first traces linked
        from mlflow.tracking.client import MlflowClient

        link, linked = MlflowClient.link_traces_to_run, []

        def dies_in_the_second_link(self, trace_ids, run_id):
            linked.append(1)
            if len(linked) == 2:
                die()
            return link(self, trace_ids, run_id)

        import experiments.tracking.evaluation as evaluation

        evaluation.LINK_BATCH = 10
        MlflowClient.link_traces_to_run = dies_in_the_second_link
    else:
        raise SystemExit(f"unknown stage {stage!r}; one of {STAGES}")


def tiny_model():
    """The tests' tiny random Gemma, built exactly as the ``tiny_lm`` fixture builds it."""
    path = Path(__file__).resolve().parents[2] / "conftest.py"
    spec = importlib.util.spec_from_file_location("steer_eval_tests_conftest", path)
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    from steering.models import wrap_model

    return wrap_model(
        conftest.build_tiny_gemma(), conftest.build_tiny_tokenizer(), "tiny-random-gemma3"
    )


def main(stage: str, config_path: str, threads: int) -> None:
    import torch

    from experiments.config import load_config
    from experiments.phase5.run import run_phase5
    from metrics.embedder import load_embedder

    torch.set_num_threads(threads)
    config = load_config(config_path)
    lm, embedder = tiny_model(), load_embedder("embedded", "cpu")
    arm(stage)
    run_phase5(config, lm=lm, embedder=embedder)
    print("the run finished: the kill point was never reached", file=sys.stderr)
    raise SystemExit(3)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
