"""The Ray executor on the tiny model: the local texts, a killed worker, a dead pool.

Stage-level: the real plan, seeded random directions as the concepts' vectors (no
probes needed), the real ``generate`` driver and run folder; the actors load the tiny
model from a folder as they would a real model.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections import Counter

import pytest
import torch

from experiments.concepts import load_concepts
from experiments.config import load_config
from experiments.execution import ExecutionError, LocalExecutor
from experiments.execution.ray import RayExecutor
from experiments.kernel.generate import generate_rows
from experiments.kernel.plan import build_plan
from experiments.kernel.vectors import VectorSet, random_directions
from experiments.rundir import RunDir
from experiments.timer import Timer
from steering.models import ModelSpec
from steering.vector import SteeringVector

LAYER = 2


def stage_config(tmp_path, *extra: str):
    return load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=10",
            "generation.batch_size=4",
            f"layer={LAYER}",
            "controls.random_directions=1",
            "controls.prompt_baseline=true",
            f"tracking.results_dir={tmp_path}",
            *extra,
        ],
    )


def stage(config, lm):
    """The report plan of three concepts (5 steered arms-strengths + 1 unsteered each)."""
    graph = load_concepts(config.concepts.file, limit=config.concepts.limit)

    def vector(d):
        return SteeringVector.from_direction(d, LAYER, alpha=10.0, beta=0.2, mode="additive")

    vectors = VectorSet(
        LAYER,
        10.0,
        {
            c.synset: vector(random_directions(7, c.synset, 1, lm.hidden_size)[0])
            for c in graph.concepts
        },
        {
            c.synset: [vector(d) for d in random_directions(0, c.synset, 1, lm.hidden_size)]
            for c in graph.concepts
        },
    )
    return build_plan(config, graph, vectors), vectors


def run_stage(config, lm, tmp_path, name, executor, on_batch=None) -> RunDir:
    plan, vectors = stage(config, lm)
    run_dir = RunDir(tmp_path, name).create()
    generate_rows(config, plan, vectors, lm, run_dir, Timer(), on_batch=on_batch, executor=executor)
    return run_dir


def by_key(run_dir: RunDir) -> dict[str, tuple]:
    rows = run_dir.read_generations()
    counts = Counter(r["key"] for r in rows)
    assert max(counts.values()) == 1, counts.most_common(3)
    return {r["key"]: (r["text"], r["nll"], r["n_new_tokens"]) for r in rows}


@pytest.fixture(scope="module")
def local_texts(tmp_path_factory, tiny_from_dir):
    """The local executor's rows (one torch thread, as each test actor has)."""
    tmp = tmp_path_factory.mktemp("local")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = stage_config(tmp)
        run_dir = run_stage(config, tiny_from_dir, tmp, "local", LocalExecutor(tiny_from_dir))
    finally:
        torch.set_num_threads(before)
    plan, _ = stage(config, tiny_from_dir)
    return {r.key for r in plan.rows}, by_key(run_dir)


def pool(tiny_model_dir, workers: int = 2, **kwargs) -> RayExecutor:
    return RayExecutor(
        ModelSpec(str(tiny_model_dir), "cpu", "float32"),
        workers=workers,
        cpus_per_worker=0.5,
        **kwargs,
    )


def test_ray_workers_write_the_local_texts(
    ray_cluster, tiny_model_dir, tiny_from_dir, local_texts, tmp_path
):
    planned, local = local_texts
    executor = pool(tiny_model_dir)
    try:
        run_dir = run_stage(stage_config(tmp_path), tiny_from_dir, tmp_path, "ray", executor)
        pids = executor.worker_pids()
    finally:
        executor.close()
    got = by_key(run_dir)
    assert set(got) == planned == set(local)
    assert len(planned) == 3 * 3 * 7  # concepts × prompts × (1 + 2 arms × 2 signs + prompt × 2)
    differ = [k for k in planned if got[k] != local[k]]
    assert not differ, f"{len(differ)} of {len(planned)} rows differ, e.g. {differ[:2]}"
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert executor.retries == 0


def test_by_default_ray_gives_the_local_run_row_for_row(
    ray_cluster, tiny_model_dir, tiny_from_dir, tmp_path
):
    """No thread setting anywhere: the driver keeps torch's default thread count, and the
    executor built from the config gives its actors the same, so every row (text, NLL,
    token count) equals the local run's; with one CPU per actor and one thread each, an
    earlier default, fp32 attention gave other last bits."""
    from experiments.execution import make_executor

    config = stage_config(tmp_path, f"model={tiny_model_dir}", "device=cpu", "dtype=float32")
    local = by_key(
        run_stage(config, tiny_from_dir, tmp_path, "local", LocalExecutor(tiny_from_dir))
    )
    ray_config = config.model_copy(
        update={"execution": config.execution.model_copy(update={"executor": "ray"})}
    )
    executor = make_executor(ray_config, tiny_from_dir)
    try:
        got = by_key(run_stage(config, tiny_from_dir, tmp_path, "ray-default", executor))
        threads = [info["threads"] for info in executor._info.values()]
    finally:
        executor.close()
    assert threads == [torch.get_num_threads()] * ray_config.execution.workers
    assert set(got) == set(local)
    differ = [k for k in local if got[k] != local[k]]
    assert not differ, f"{len(differ)} of {len(local)} rows differ, e.g. {differ[:2]}"


def test_a_killed_worker_s_batch_is_rerun_on_another(
    ray_cluster, tiny_model_dir, tiny_from_dir, local_texts, tmp_path, caplog
):
    """SIGKILL one actor's process on the first streamed result: every row still lands
    once, with the local text, and the retry is logged."""
    planned, local = local_texts
    executor = pool(tiny_model_dir, max_retries=2)
    killed: list[int] = []

    def kill_one(done: int, total: int) -> None:
        if not killed:
            killed.append(executor.worker_pids()[0])
            os.kill(killed[0], signal.SIGKILL)

    caplog.set_level(logging.WARNING, logger="experiments.execution.ray")
    try:
        run_dir = run_stage(
            stage_config(tmp_path), tiny_from_dir, tmp_path, "kill", executor, kill_one
        )
        survivors = executor.worker_pids()
    finally:
        executor.close()
    got = by_key(run_dir)
    assert set(got) == planned
    assert all(got[k] == local[k] for k in planned)
    assert executor.deaths == 1 and killed[0] not in survivors
    assert executor.retries >= 1
    assert "retrying batch" in caplog.text and "died" in caplog.text


def test_when_every_worker_dies_the_run_stops_and_resume_finishes_it(
    ray_cluster, tiny_model_dir, tiny_from_dir, local_texts, tmp_path
):
    planned, _ = local_texts
    config = stage_config(tmp_path)
    executor = pool(tiny_model_dir)

    def kill_all(done: int, total: int) -> None:
        for pid in executor.worker_pids():
            os.kill(pid, signal.SIGKILL)

    try:
        with pytest.raises(ExecutionError, match=r"all 2 Ray workers died") as err:
            run_stage(config, tiny_from_dir, tmp_path, "dead", executor, kill_all)
    finally:
        executor.close()
    assert "steer-eval run --resume dead" in str(err.value)
    partial = by_key(RunDir(tmp_path, "dead"))
    assert 0 < len(partial) < len(planned)
    resumed = pool(tiny_model_dir)
    try:
        run_dir = run_stage(config, tiny_from_dir, tmp_path, "dead", resumed)
    finally:
        resumed.close()
    assert set(by_key(run_dir)) == planned  # every row exactly once (by_key checks)


def test_too_few_cpus_is_a_clear_error(ray_cluster, tiny_model_dir):
    executor = RayExecutor(ModelSpec(str(tiny_model_dir), "cpu"), workers=3)
    with pytest.raises(ExecutionError, match=r"3 Ray workers need 3 CPU but the cluster has 2"):
        executor.start()


def test_without_ray_installed_the_error_says_how_to_install(monkeypatch):
    from experiments.execution.ray import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # what an absent package looks like
    with pytest.raises(ExecutionError, match=r"make setup-ray, or pip install -e '\.\[ray\]'"):
        import_ray()


def pipeline_config(tmp_path, tiny_model_dir):
    """The study's shape on the tiny model: held-out β, the null and the prompt baseline."""
    return load_config(
        "configs/phase5.yaml",
        [
            f"model={tiny_model_dir}",
            "device=cpu",
            "dtype=float32",
            f"layer={LAYER}",
            "concepts.limit=3",
            "generation.max_new_tokens=10",
            "generation.batch_size=4",
            "selection.mode=heldout",
            "controls.random_directions=1",
            "controls.prompt_baseline=true",
            "criteria.n_boot=200",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )


def test_a_ray_run_gives_the_local_run_s_numbers(
    ray_cluster, mlflow_store, tiny_model_dir, tiny_from_dir, embedder, one_thread, tmp_path
):
    """Phase 5 with held-out selection (two plans on the same actors), end to end."""
    from experiments import tracking
    from experiments.phase5.run import run_phase5

    config = pipeline_config(tmp_path, tiny_model_dir)
    local = run_phase5(config, lm=tiny_from_dir, embedder=embedder)
    ray_run = run_phase5(
        config,
        lm=tiny_from_dir,
        embedder=embedder,
        execution={"executor": "ray", "workers": 2, "cpus_per_worker": 0.5},
    )
    a = {g["key"]: g for g in RunDir(tmp_path / "res", local.run_id).read_scored()}
    b = {g["key"]: g for g in RunDir(tmp_path / "res", ray_run.run_id).read_scored()}
    assert set(a) == set(b) and any(g["split"] == "selection" for g in a.values())
    assert all(a[k]["text"] == b[k]["text"] and a[k]["delta"] == b[k]["delta"] for k in a)
    criteria = {k: (v.status, v.value) for k, v in local.record.criteria.items()}
    assert criteria == {k: (v.status, v.value) for k, v in ray_run.record.criteria.items()}
    assert local.record.statistics == ray_run.record.statistics
    params = [tracking.get_run(r.run_id).data.params for r in (local, ray_run)]
    assert params[0]["config_hash"] == params[1]["config_hash"]
    assert params[1]["config.execution.executor"] == "ray"
    assert tracking.get_run(ray_run.run_id).data.metrics["execution/retries"] == 0
