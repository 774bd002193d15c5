"""``steer_eval.evaluate`` is ``steer-eval run`` from Python: on the tiny random Gemma 3,
a dict of arrays and a repeng-like ControlVector each give the record (config hash),
answer and texts of the command line ``Result.command`` names; the vectors are written
once, by content, where that command reads them; ``load_run`` reads a run back as the
call returned it; a loaded model must be the config's."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import numpy as np
import pytest
from typer.testing import CliRunner

import steer_eval
from experiments.cli import app
from experiments.phase5.samples import COLUMNS
from steering.vector_files import read_control_vector

runner = CliRunner()

# The tiny Phase 5 run of tests/conftest.py (TINY_PHASE5) as keyword options.
TINY = {
    "generation": {"max_new_tokens": 6, "batch_size": 16},
    "controls": {"random_directions": 1},
    "criteria": {"n_boot": 200},
}


@dataclass
class ControlVector:
    """repeng's ControlVector (``repeng/extract.py``): its two fields steer_eval reads."""

    model_type: str
    directions: dict[int, np.ndarray]


@dataclass
class StatisticalControlVector:
    """EasySteer's extracted vector (ZJU-REAL/EasySteer, ``easysteer/steer/utils.py``):
    its fields; ``directions`` keyed by decoder-layer id (tests/steer_eval/test_easysteer.py)."""

    method: str
    directions: dict[int, np.ndarray]
    metadata: dict | None = None
    model_type: str = "unknown"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("steer-eval-api")


def call(tmp, tiny_model_dir, tiny_from_dir, embedder, single_threaded, **kwargs):
    with single_threaded():
        return steer_eval.evaluate(
            model=str(tiny_model_dir),
            lm=tiny_from_dir,
            embedder=embedder,
            layer=2,
            results_dir=tmp / "res",
            classifier={"dir": str(tmp / "cls")},
            progress=None,
            **TINY,
            **kwargs,
        )


def cli_twin(result: steer_eval.Result, single_threaded) -> steer_eval.Result:
    """The run ``result.command`` makes, read back."""
    argv = shlex.split(result.command)
    assert argv[:2] == ["steer-eval", "run"]
    # the command line picks torch's threads from the cores free (2 on an idle CI
    # machine); a float32 sum's last bits depend on the count, so pin it to the call's
    with single_threaded():
        out = runner.invoke(app, [*argv[1:], "--json"], env={"STEER_EVAL_THREADS": "1"})
    assert out.exit_code == 0, out.output
    run_id = json.loads(out.stdout)["answer"]["run_id"]
    assert run_id != result.run_id
    return steer_eval.load_run(run_id)


def same_answer(a: steer_eval.Result, b: steer_eval.Result) -> None:
    left, right = a.answer.to_dict(), b.answer.to_dict()
    assert left.pop("run_id") == a.run_id and right.pop("run_id") == b.run_id
    assert left == right


@pytest.fixture(scope="module")
def arrays(tmp, mlflow_store, tiny_model_dir, tiny_from_dir, embedder, single_threaded):
    """Two concepts' vectors as a dict (one named by its synset, one by its name)."""
    rng = np.random.default_rng(3)
    vectors = {"herb": rng.normal(size=64), "person.n.01": rng.normal(size=64).astype("f4")}
    result = call(tmp, tiny_model_dir, tiny_from_dir, embedder, single_threaded, vectors=vectors)
    return vectors, result


@pytest.fixture(scope="module")
def control_vector(tmp, mlflow_store, tiny_model_dir, tiny_from_dir, embedder, single_threaded):
    """Two concepts' repeng-like vectors at layers 1-3, steered as deployed (k = 2)."""
    rng = np.random.default_rng(5)
    cvs = {
        name: ControlVector("gemma3_text", {n: rng.normal(size=64).astype("f4") for n in (1, 2, 3)})
        for name in ("herb", "person")
    }
    result = call(
        tmp, tiny_model_dir, tiny_from_dir, embedder, single_threaded,
        vectors=cvs, layers="file", coefficient=2.0,
    )  # fmt: skip
    return cvs, result


def test_a_dict_of_arrays_gives_the_record_and_answer_of_its_command_line(arrays, single_threaded):
    _, result = arrays
    cfg = result.record.config
    assert cfg.steering.vector_source == "file"
    assert cfg.concepts.synsets == ["herb.n.01", "person.n.01"]
    folder = result.command.split("steering.vector_file=", 1)[1].split()[0]
    assert cfg.steering.vector_file == folder
    twin = cli_twin(result, single_threaded)
    assert twin.config_hash == result.config_hash
    assert twin.record.config == result.record.config
    same_answer(result, twin)
    assert twin.samples["text"].tolist() == result.samples["text"].tolist()


def test_the_vectors_are_written_once_by_content_beside_the_runs(arrays, tmp):
    vectors, result = arrays
    folder = tmp / "res" / "vectors"
    (staged,) = folder.iterdir()
    assert result.record.config.steering.vector_file == str(staged)
    assert sorted(p.name for p in staged.iterdir()) == ["herb.n.01.npy", "person.n.01.npy"]
    assert np.array_equal(np.load(staged / "herb.n.01.npy"), vectors["herb"].astype("f4"))
    from steer_eval.vectors import Concepts, entries, stage

    known = Concepts("f", ("herb.n.01", "person.n.01"), ("herb", "person"))
    again = stage(entries(vectors, None, known), tmp / "res")
    assert again == staged  # the same vectors, the same path, so the same config hash
    other = stage(entries({"herb": vectors["herb"] * 2}, None, known), tmp / "res")
    assert other != staged


def test_a_control_vector_is_steered_as_deployed_like_its_command_line(
    control_vector, single_threaded
):
    cvs, result = control_vector
    steering = result.record.config.steering
    assert (steering.layers, steering.scale, steering.coefficient) == ("file", "file", 2.0)
    assert result.record.config.concepts.synsets == ["herb.n.01", "person.n.01"]
    found = result.record.diagnostics["intervention"]
    assert found["layers"] == [1, 2, 3] and found["coefficient"] == 2.0
    for name, cv in cvs.items():
        written = read_control_vector(f"{steering.vector_file}/{name}.n.01.gguf")
        assert written.model_hint == "gemma3_text"
        assert written.directions.keys() == cv.directions.keys()
        for n, v in cv.directions.items():
            assert np.array_equal(written.directions[n], v)
    assert "at layers 1, 2, 3 in one pass" in result.answer.question
    twin = cli_twin(result, single_threaded)
    assert twin.config_hash == result.config_hash
    same_answer(result, twin)
    assert twin.samples["text"].tolist() == result.samples["text"].tolist()


def test_the_result_holds_the_samples_text_first_and_its_address(arrays):
    _, result = arrays
    samples = result.samples
    assert list(samples.columns) == list(COLUMNS) and samples.columns[0] == "text"
    out = runner.invoke(app, ["samples", result.run_id, "--json"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.stdout)["samples"]
    assert [s["text"] for s in shown] == samples["text"].tolist()
    assert result.run_id in result.url
    assert result.run_dir.name == result.run_id and (result.run_dir / "answer.md").exists()
    assert result.answer_markdown().startswith(f"## The answer (run `{result.run_id}`)")
    from experiments import tracking

    tags = tracking.get_run(result.run_id).data.tags
    assert tags["steer_eval.evaluate"] == result.command


def test_load_run_reads_a_run_back_as_the_call_returned_it(arrays):
    _, result = arrays
    again = steer_eval.load_run(result.run_id)
    assert again.record == result.record and again.run_dir == result.run_dir
    same_answer(result, again)
    assert again.samples.equals(result.samples)
    assert again.command is None


def test_load_run_refuses_what_is_not_a_phase5_parent(arrays):
    _, result = arrays
    with pytest.raises(LookupError, match="no MLflow run 'nope'"):
        steer_eval.load_run("nope")
    from experiments import tracking

    children = tracking.child_runs(result.run_id, result.record.experiment)
    assert children
    with pytest.raises(steer_eval.ArgumentError, match="is a child run of"):
        steer_eval.load_run(children[0].info.run_id)


def test_a_loaded_model_must_be_the_configs(tiny_from_dir):
    with pytest.raises(steer_eval.ArgumentError, match="lm: loaded from"):
        steer_eval.evaluate(model="embedded", lm=tiny_from_dir, progress=None)


@pytest.fixture(scope="module")
def one_concept(tmp, mlflow_store, tiny_model_dir, tiny_from_dir, embedder, single_threaded):
    """One concept's vector alone, with the likelihood outcome on."""
    rng = np.random.default_rng(8)
    result = call(
        tmp, tiny_model_dir, tiny_from_dir, embedder, single_threaded,
        vectors={"herb": rng.normal(size=64)},
        likelihood={"enabled": True, "texts": 4, "neutral_nulls": 1, "other_nulls": 1},
    )  # fmt: skip
    return result


def test_one_concept_alone_is_evaluated_and_says_what_it_could_not_evaluate(one_concept):
    """No other concept's texts to pair with: the run finishes, scores its texts, and
    its answer names what it could not evaluate (Δ's reference gap, the likelihood
    outcome) with the reason, beside the verdicts it could reach."""
    result = one_concept
    assert result.record.config.concepts.synsets == ["herb.n.01"]
    assert len(result.samples) > 0 and set(result.samples["concept"]) == {"herb.n.01"}
    measurement = result.record.statistics.measurement
    assert measurement is not None
    assert measurement.reference_gap is None and not measurement.likelihood
    assert "(the run has no other concept)" in measurement.unpaired["herb.n.01"]
    assert (result.run_dir / "likelihood.jsonl").exists() is False
    (note,) = [n for n in result.answer.notes if n.startswith("Not evaluable for herb.n.01")]
    assert "Δ's reference gap (Δ's scale) and the likelihood outcome with its nulls" in note
    assert "no other concept's text avoids mentioning it" in note
    assert "Evaluated: the generation effect against random directions" in note
    markdown = result.answer_markdown()
    assert note in markdown
    assert "c3_f1_correlation | n/a | 0.5 | not evaluable" in markdown  # r needs 3 concepts
    assert all(v.reason for v in result.answer.verdicts if v.status == "not_evaluable")


def test_easysteer_vectors_are_the_run_of_the_same_vectors_as_a_control_vector(
    control_vector, tmp, tiny_model_dir, tiny_from_dir, embedder, single_threaded
):
    """EasySteer objects holding the repeng run's vectors, at the same layers and k: the
    same vector folder, config hash, answer and texts."""
    cvs, repeng = control_vector
    easysteer = {
        name: StatisticalControlVector("diffmean", dict(cv.directions), {}, cv.model_type)
        for name, cv in cvs.items()
    }
    result = call(
        tmp, tiny_model_dir, tiny_from_dir, embedder, single_threaded,
        vectors=easysteer, layers="file", coefficient=2.0,
    )  # fmt: skip
    assert result.record.config == repeng.record.config
    assert result.config_hash == repeng.config_hash
    same_answer(result, repeng)
    assert result.samples["text"].tolist() == repeng.samples["text"].tolist()
