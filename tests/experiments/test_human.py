"""Part B: export, rating flow, import and correlation against a real MLflow store."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments import human, tracking
from experiments.concepts import DEFAULT_PATH
from experiments.human import (
    CSV_COLUMNS,
    FORMULA_TRIGGERS,
    HumanValidationError,
    export_samples,
    guess_is_correct,
    import_ratings,
    load_answer_key,
    neutralise,
    restore,
    stratified_sample,
)
from metrics.stats import pearson

CONCEPTS = [
    ("person.n.01", "person"),
    ("change.v.01", "change"),
    ("bird_genus.n.01", "bird genus"),
    ("herb.n.01", "herb"),
]
STRENGTHS = [-1.0, 0.0, 1.0]
PAYLOADS = [
    '=HYPERLINK("http://evil.example","click")',
    "+1+1 plus",
    "-2+3 minus",
    "@SUM(A1:A2)",
    "\tTAB first",
    "\rCR first",
    "   =1+2 after spaces",
    "＝1+1 full width",
    'a comma, a "quote" and\na newline',
    "plain words",
    "[bold]markup[/bold] stays literal",
    "escape \x1b[31m red",
]
EXPERIMENT = "human-test"


# --------------------------------------------------------------------------- helpers


def synthetic_records(seed: int = 0) -> list[dict]:
    """4 concepts × 3 strengths × 3 prompts × 2 samples, Δ rising with strength."""
    rng = np.random.default_rng(seed)
    records, i = [], 0
    for ci, (synset, name) in enumerate(CONCEPTS):
        for s in STRENGTHS:
            for p in range(3):
                for n in range(2):
                    records.append(
                        {
                            "key": f"{synset}|p{p}|n{n}|s{s:+.3f}",
                            "concept": synset,
                            "concept_name": name,
                            "prompt_index": p,
                            "prompt": f"Tell me about {name}." if p == 0 else "Here is a story:",
                            "sample": n,
                            "strength": s,
                            "seed": 1,
                            "text": f"{PAYLOADS[i % len(PAYLOADS)]} #{i}-{seed}",
                            "delta": float(0.12 * s + 0.03 * ci + rng.normal(0, 0.04)),
                        }
                    )
                    i += 1
    return records


def make_run(root: Path, records: list[dict] | None = None) -> tuple[str, list[dict]]:
    """A finished Phase 5 parent with one child per cell and a local generations.jsonl."""
    records = records if records is not None else synthetic_records()
    results = root / "res"
    run_id = tracking.start_run(EXPERIMENT, "phase5 synthetic", tags={"phase": "5"})
    tracking.log_params(
        run_id,
        {
            "config.tracking.results_dir": str(results),
            "config.concepts.file": str(DEFAULT_PATH),
            "config.criteria.human_r_pass": 0.7,
            "config.criteria.human_r_panel": 0.5,
        },
    )
    c = tracking.client()
    exp = tracking.experiment_id(EXPERIMENT)
    for synset, s in sorted({(r["concept"], r["strength"]) for r in records}):
        child = c.create_run(
            exp,
            run_name=f"{synset} {s:+g}",
            tags={"mlflow.parentRunId": run_id, "cell": f"{synset}|{s:+.3f}", "phase": "5"},
        )
        c.set_terminated(child.info.run_id)
    out = results / run_id
    out.mkdir(parents=True)
    (out / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    tracking.end_run(run_id)
    return run_id, records


def read_export(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def write_rated(path: Path, rows: list[dict[str, str]], columns=None) -> Path:
    """What a spreadsheet saves: plain csv module output, minimal quoting."""
    columns = columns or list(rows[0])
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def rated_rows(export_csv: Path, key: dict, rate) -> list[dict[str, str]]:
    """The export with human_rating filled by ``rate(answer key entry)`` (None = blank)."""
    samples = human.key_samples(key)
    rows = read_export(export_csv)
    for row in rows:
        value = rate(samples[row["sample_id"]])
        row["human_rating"] = "" if value is None else str(value)
    return rows


def human_children(run_id: str) -> list:
    run = tracking.get_run(run_id)
    return human._children(run, " and tags.phase = '5B'")


def snapshot(run_id: str, folder: Path) -> tuple:
    """Everything an import may change: children, parent tags/metrics, local files."""
    run = tracking.get_run(run_id)
    files = {str(p): p.read_bytes() for p in sorted(folder.parent.rglob("*")) if p.is_file()}
    return (
        len(human._children(run)),
        dict(run.data.tags),
        dict(run.data.metrics),
        files,
    )


@pytest.fixture
def exported(mlflow_store, tmp_path):
    """A fresh synthetic run with a 50-sample export."""
    run_id, records = make_run(tmp_path)
    result = export_samples(run_id, n=50, seed=3)
    key = load_answer_key(result.key_path, run_id)
    return run_id, result, key, records


# --------------------------------------------------------------------------- cell safety


@pytest.mark.parametrize("payload", [*PAYLOADS, "-", "=", "", "safe"])
def test_neutralise_round_trip(payload):
    cell = neutralise(payload)
    assert cell[:1] not in FORMULA_TRIGGERS
    assert cell.lstrip()[:1] not in FORMULA_TRIGGERS or cell.startswith("'")
    assert "\x1b" not in cell
    assert human.canonical_text(cell) == human.canonical_text(payload)
    assert restore(neutralise("safe text")) == "safe text"


# --------------------------------------------------------------------------- sampling


def test_stratified_sample_is_balanced_and_seeded():
    records = [
        {"key": f"c{c}|p{p}|s{s}", "concept": f"c{c}", "strength": s, "prompt_index": p}
        for c in range(10)
        for s in (-1.0, 0.0, 1.0)
        for p in range(3)
    ]
    for n, per_concept in ((50, {5}), (20, {2})):
        chosen = stratified_sample(records, n, seed=7)
        assert len(chosen) == n and len({r["key"] for r in chosen}) == n
        cells = {(c, s): 0 for c in range(10) for s in (-1.0, 0.0, 1.0)}
        for r in chosen:
            cells[(int(r["concept"][1:]), r["strength"])] += 1
        assert max(cells.values()) - min(cells.values()) <= 1
        concepts = {f"c{c}": sum(r["concept"] == f"c{c}" for r in chosen) for c in range(10)}
        assert set(concepts.values()) == per_concept
        strengths = [sum(r["strength"] == s for r in chosen) for s in (-1.0, 0.0, 1.0)]
        assert max(strengths) - min(strengths) <= 1
    assert stratified_sample(records, 50, 7) == stratified_sample(records, 50, 7)
    assert stratified_sample(records, 50, 7) != stratified_sample(records, 50, 8)
    # A thin cell is used up and the rest is spread over the others.
    thin = [r for r in records if not (r["concept"] == "c0" and r["strength"] == 1.0)]
    thin.append({"key": "c0|only", "concept": "c0", "strength": 1.0, "prompt_index": 0})
    assert any(r["key"] == "c0|only" for r in stratified_sample(thin, 60, 1))
    assert len(stratified_sample(thin, 500, 1)) == len(thin)


# --------------------------------------------------------------------------- export


def test_export_is_stratified_blind_and_logged(exported):
    run_id, result, key, records = exported
    assert result.n == 50 and result.csv_path.parent == result.key_path.parent
    assert result.csv_path.parent.name == "human" and result.csv_path.parent.parent.name == run_id
    counts = result.cells
    assert len(counts) == 12 and set(counts.values()) == {4, 5}  # 50 over 12 cells
    per_concept = [sum(v for k, v in counts.items() if k.startswith(c)) for c, _ in CONCEPTS]
    assert max(per_concept) - min(per_concept) <= 1

    rows = read_export(result.csv_path)
    raw = result.csv_path.read_text(encoding="utf-8-sig")
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert len(rows) == 50 and {r["concept"] for r in rows} == {"REDACTED"}
    assert {r["human_rating"] for r in rows} == {""}
    for synset, name in CONCEPTS:
        assert synset not in raw and f"about {name}" not in raw
    for token in ("+1.000", "-1.000", "delta", "strength", "Tell me about"):
        assert token not in raw
    # Order carries no information: ids follow a shuffled, not a grouped, cell order.
    cells_in_order = [s["cell"] for s in key["samples"]]
    assert cells_in_order != sorted(cells_in_order)
    # The key maps every sample back to its real child run, Δ and generation.
    children = human.cell_runs(tracking.get_run(run_id))
    by_key = {r["key"]: r for r in records}
    for entry in key["samples"]:
        assert children[entry["cell"]] == entry["child_run_id"]
        assert by_key[entry["generation_key"]]["delta"] == entry["delta"]
        assert entry["prompt"] and entry["concept_name"]
    # Logged as artefacts of the parent run.
    listed = {f.path for f in tracking.client().list_artifacts(run_id, "human")}
    assert listed == {"human/human_validation.csv", "human/answer_key.json"}
    # Same seed: same bytes; a different sample refuses to overwrite without --force.
    before = result.csv_path.read_bytes()
    assert export_samples(run_id, n=50, seed=3).csv_path.read_bytes() == before
    with pytest.raises(HumanValidationError, match="different export"):
        export_samples(run_id, n=50, seed=4)
    assert result.csv_path.read_bytes() == before
    from experiments.rating import prepare_ratings_file

    prepare_ratings_file(result.csv_path, key)  # ratings in progress are never lost
    forced = export_samples(run_id, n=50, seed=4, force=True)
    assert result.csv_path.read_bytes() != before
    kept = result.csv_path.parent / f"human_ratings.{key['key_hash'][:12]}.csv"
    assert kept.exists() and "kept" in forced.warnings[0]


def test_export_neutralises_formula_cells(mlflow_store, tmp_path):
    run_id, records = make_run(tmp_path)
    result = export_samples(run_id, n=1000, seed=0, out=tmp_path / "all")
    assert result.n == len(records) and "exporting all" in result.warnings[0]
    rows = read_export(result.csv_path)
    texts = {r["text"] for r in records}
    assert len(rows) == len(records)
    for row in rows:
        for cell in row.values():
            assert cell[:1] not in FORMULA_TRIGGERS, cell
            assert (
                not cell.lstrip()[:1]
                or cell.lstrip()[:1] not in FORMULA_TRIGGERS
                or (cell.startswith("'"))
            )
        text = row["generated_text"]
        original = restore(text)
        if original[:1] in FORMULA_TRIGGERS or original.lstrip()[:1] in FORMULA_TRIGGERS:
            assert text.startswith("'")
        assert "\x1b" not in text
    # Commas, quotes and newlines survive quoting intact.
    assert any(r["generated_text"].startswith('a comma, a "quote" and\na newline') for r in rows)
    assert {human.canonical_text(r["generated_text"]) for r in rows} == {
        human.canonical_text(t) for t in texts
    }
    # Every cell is quoted on disk.
    first_data_line = result.csv_path.read_text(encoding="utf-8-sig").splitlines()[1]
    assert first_data_line.startswith('"') and first_data_line.endswith('"')


def test_export_errors(mlflow_store, tmp_path):
    with pytest.raises(HumanValidationError, match="no MLflow run"):
        export_samples("0" * 32)
    run_id, _ = make_run(tmp_path)
    child = human.cell_runs(tracking.get_run(run_id))["person.n.01|+1.000"]
    with pytest.raises(HumanValidationError, match="not a Phase 5 parent"):
        export_samples(child)
    with pytest.raises(HumanValidationError, match="at least 1"):
        export_samples(run_id, n=0)


# --------------------------------------------------------------------------- rating flow


def test_rater_flow_rate_skip_back_quit_resume(exported):
    from experiments.cli import app

    run_id, result, key, _ = exported
    samples = human.key_samples(key)
    runner = CliRunner()
    session1 = "\n".join(
        [
            "a bird",  # 001 guess
            "7",  # 001 rating
            "s",  # 002 skipped at the guess prompt: concept not revealed
            "x",  # 003 guess
            "11",  # out of range: asked again
            "abc",  # not a number: asked again
            "b",  # back to 002
            "dunno",  # 002 guess (it was never revealed)
            "3",  # 002 rating
            "5",  # 003: its guess is kept, only the rating is asked
            "q",  # 004: quit at the guess prompt
        ]
    )
    out = runner.invoke(app, ["human", "rate", "--csv", str(result.csv_path)], input=session1)
    assert out.exit_code == 0, out.output
    ratings = result.csv_path.parent / human.RATINGS_NAME
    rows = {r["sample_id"]: r for r in read_export(ratings)}
    assert [rows[s]["human_rating"] for s in ("001", "002", "003", "004")] == ["7", "3", "5", ""]
    assert [rows[s]["topic_guess"] for s in ("001", "002", "003")] == ["a bird", "dunno", "x"]
    assert "out of range" in out.output and "not a number" in out.output
    assert f"relate to {samples['001']['concept_name']}?" in out.output
    assert "3/50 rated" in out.output
    for hidden in ("Δ", "delta", "+1.000", "strength s", samples["001"]["child_run_id"]):
        assert hidden not in out.output
    assert "[bold]markup[/bold]" in out.output or "markup" not in out.output
    # The export itself is untouched; the working copy has the extra column.
    assert {r["human_rating"] for r in read_export(result.csv_path)} == {""}
    assert list(rows["001"]) == [*CSV_COLUMNS, "topic_guess"]

    # Resume without guesses: starts at 004; back to 003 and Enter keeps its rating.
    session2 = "\n".join(["b", "", "8", "s"])  # then EOF = quit
    out = runner.invoke(
        app, ["human", "rate", "--run", run_id, "--no-guess"], input=session2 + "\n"
    )
    assert out.exit_code == 0, out.output
    assert "current rating: 5" in out.output and "What is this text about" not in out.output
    rows = {r["sample_id"]: r for r in read_export(ratings)}
    assert [rows[s]["human_rating"] for s in ("003", "004", "005")] == ["5", "8", ""]
    assert "saved 4/50 rated" in out.output


def test_rater_saves_after_every_answer_and_finishes(exported):
    import io

    from rich.console import Console

    from experiments.rating import prepare_ratings_file, rate_interactive

    _, result, key, _ = exported
    path = prepare_ratings_file(result.csv_path, key)
    saved: list[int] = []

    def on_save(items):
        saved.append(sum(i.rating is not None for i in items))
        on_disk = read_export(path)
        assert sum(r["human_rating"] != "" for r in on_disk) == saved[-1]

    answers = io.StringIO("\n".join(["6"] * 49 + ["s"]) + "\n")
    console = Console(file=io.StringIO(), width=100)
    summary = rate_interactive(path, key, False, answers, console, on_save=on_save)
    assert saved[:3] == [1, 2, 3] and summary.rated == 49 and summary.skipped == ["050"]
    assert not summary.quit
    summary = rate_interactive(path, key, False, io.StringIO("4\n"), console)
    assert summary.rated == 50 and "all done" in console.file.getvalue()
    # A working copy from a different export is refused, not silently mixed.
    other = load_answer_key(result.key_path)
    other["samples"][0]["text_sha256"] = "0" * 64
    other["key_hash"] = human._key_body_hash(other)
    with pytest.raises(HumanValidationError, match="does not match the answer key"):
        prepare_ratings_file(result.csv_path, other)


# --------------------------------------------------------------------------- import


def test_import_validation_errors_change_nothing(exported, tmp_path):
    from experiments.cli import app

    run_id, result, key, _ = exported
    folder = result.csv_path.parent
    good = rated_rows(result.csv_path, key, lambda s: round(5 + 10 * s["delta"]))
    before = snapshot(run_id, folder)
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    shutil.copy(result.key_path, bad_dir / human.KEY_NAME)

    def attempt(name: str, rows=None, raw: bytes | None = None, **kwargs) -> str:
        path = bad_dir / name
        if raw is not None:
            path.write_bytes(raw)
        else:
            write_rated(path, rows)
        with pytest.raises(HumanValidationError) as info:
            import_ratings(path, kwargs.pop("run", run_id), **kwargs)
        assert snapshot(run_id, folder) == before, name
        return str(info.value)

    # Missing column.
    rows = [{k: v for k, v in r.items() if k != "human_rating"} for r in good]
    assert "missing column(s) ['human_rating']" in attempt("missing.csv", rows)
    # Bad encoding (Latin-1 bytes).
    text = "sample_id,concept,generated_text,human_rating\n001,REDACTED,caf\xe9,5\n"
    assert "not UTF-8" in attempt("latin1.csv", raw=text.encode("latin-1"))
    # Malformed quoting.
    assert "malformed CSV" in attempt(
        "quotes.csv", raw=b'sample_id,concept,generated_text,human_rating\n001,x,"open,5\n'
    )
    # Out of range, negative, non-numeric, fractional: every row named.
    rows = [dict(r) for r in good]
    for i, value in ((2, "11"), (4, "-1"), (6, "abc"), (8, "7.5")):
        rows[i]["human_rating"] = value
    message = attempt("range.csv", rows)
    assert "4 problem(s)" in message
    for i, value in ((2, "11"), (4, "-1"), (6, "abc"), (8, "7.5")):
        assert f"row {i + 1} (line " in message
        assert f"sample_id '{rows[i]['sample_id']}'): rating {value!r}" in message
    # Duplicate and unknown ids.
    rows = [dict(r) for r in good]
    rows[5]["sample_id"] = rows[4]["sample_id"]
    rows[7]["sample_id"] = "999"
    message = attempt("ids.csv", rows)
    assert "duplicate sample_id" in message and "unknown sample_id '999'" in message
    # Text that is not the exported text (edited, or a CSV from another export).
    rows = [dict(r) for r in good]
    rows[0]["generated_text"] = "something else entirely"
    assert "differs from the exported text" in attempt("text.csv", rows)
    # A tampered answer key.
    tampered = json.loads(result.key_path.read_text())
    tampered["samples"][0]["delta"] = 0.99
    (bad_dir / "tampered.json").write_text(json.dumps(tampered))
    assert "hash check" in attempt("t.csv", good, key_path=bad_dir / "tampered.json")
    # An answer key from another run.
    other_id, _ = make_run(tmp_path / "other", synthetic_records(seed=1))
    other = export_samples(other_id, n=50, seed=3)
    assert f"belongs to run {other_id}" in attempt("o.csv", good, key_path=other.key_path)
    # A run id that does not exist.
    assert "no MLflow run" in attempt("n.csv", good, run="f" * 32)
    # Too few ratings.
    rows = [dict(r, human_rating="") if i >= 10 else r for i, r in enumerate(good)]
    assert "10 sample(s) rated; at least 20" in attempt("few.csv", rows)

    # Through the CLI: exit code 2 and a message, no traceback.
    rows = [dict(r) for r in good]
    rows[3]["human_rating"] = "eleven"
    path = write_rated(bad_dir / "cli.csv", rows)
    out = CliRunner().invoke(app, ["human", "import", str(path), "--run", run_id])
    assert out.exit_code == 2 and "error:" in out.output and "'eleven'" in out.output
    assert "Traceback" not in out.output
    assert snapshot(run_id, folder) == before


def test_import_accepts_spreadsheet_quirks_and_partial_ratings(exported, tmp_path):
    run_id, result, key, _ = exported
    rows = rated_rows(
        result.csv_path,
        key,
        lambda s: None if s["sample_id"] in ("010", "020") else round(5 + 10 * s["delta"]),
    )
    for row in rows:
        row["sample_id"] = str(int(row["sample_id"]))  # leading zeros dropped
        row["generated_text"] = restore(row["generated_text"])  # ' prefix swallowed
        if row["human_rating"]:
            row["human_rating"] += ".0"  # numbers written as floats
    rows.pop()  # one row deleted
    path = write_rated(tmp_path / "sheet.csv", rows, [*CSV_COLUMNS, "notes"])
    res = import_ratings(path, run_id, key_path=result.key_path)
    assert res.n_rated == 47 and res.n_samples == 50
    assert any("missing from the file" in w for w in res.warnings)
    assert any("only 47 of 50" in w for w in res.warnings)
    assert any("extra column" in w for w in res.warnings)


def _ratings_with_r(key: dict, low: float, high: float) -> dict[str, int]:
    """Integer ratings whose Pearson r with Δ falls in [low, high] (test data only)."""
    rng = np.random.default_rng(0)
    samples = key["samples"]
    delta = np.array([s["delta"] for s in samples])
    z = (delta - delta.mean()) / delta.std()
    noise = rng.normal(size=len(z))
    for w in np.linspace(0, 10, 1001):
        ratings = np.clip(np.round(5 + 1.5 * (z + w * noise)), 0, 10).astype(int)
        r = pearson(ratings.astype(float), delta)
        if r.evaluable and low <= r.r <= high:
            return {s["sample_id"]: int(v) for s, v in zip(samples, ratings, strict=True)}
    raise AssertionError("no mixing weight gives r in range")


def test_import_logs_child_run_criterion_and_reimport_replaces(exported, tmp_path):
    from experiments.cli import app

    run_id, result, key, _ = exported
    c = tracking.client()
    guesses = {"bird_genus.n.01": "birds", "herb.n.01": "plants", "person.n.01": "weather"}

    def import_with(ratings: dict[str, int], name: str):
        rows = read_export(result.csv_path)
        samples = human.key_samples(key)
        for row in rows:
            row["human_rating"] = str(ratings[row["sample_id"]])
            row["topic_guess"] = guesses.get(samples[row["sample_id"]]["concept"], "")
        path = write_rated(tmp_path / name, rows)
        return CliRunner().invoke(app, ["human", "import", str(path), "--run", run_id])

    high = _ratings_with_r(key, 0.85, 0.95)
    out = import_with(high, "high.csv")
    assert out.exit_code == 0, out.output
    assert "pass" in out.output and "topic-guess accuracy" in out.output
    (child,) = human_children(run_id)
    data = c.get_run(child.info.run_id).data
    expected_r = pearson(
        [high[s["sample_id"]] for s in key["samples"]], [s["delta"] for s in key["samples"]]
    )
    assert data.metrics["human_r"] == pytest.approx(expected_r.r)
    assert data.metrics["human_r_ci_low"] < expected_r.r < data.metrics["human_r_ci_high"]
    assert data.metrics["n_rated"] == 50 and "human_spearman" in data.metrics
    n_guessed = sum(1 for s in key["samples"] if s["concept"] in guesses)
    n_right = sum(1 for s in key["samples"] if s["concept"] in ("bird_genus.n.01", "herb.n.01"))
    assert data.metrics["guess_accuracy"] == pytest.approx(n_right / n_guessed)
    assert data.tags["mlflow.parentRunId"] == run_id and data.tags["phase"] == "5B"
    assert c.get_run(child.info.run_id).info.run_name == "human-validation"
    parent = tracking.get_run(run_id).data.tags
    assert (
        parent["criterion.c4_human"] == "pass" and parent["criterion.c4_human_or_panel"] == "pass"
    )
    artifacts = {f.path for f in c.list_artifacts(child.info.run_id)}
    assert {"human_ratings.json", "human_validation_result.json", "plots"} <= artifacts
    assert [f.path for f in c.list_artifacts(child.info.run_id, "plots")] == [
        "plots/human_vs_delta.png"
    ]
    assert (result.csv_path.parent / human.RESULT_NAME).exists()

    # Re-import a corrected file: the same child run, new figures, table replaced.
    for low, high_r, status in ((-0.2, 0.3, "panel_required"), (0.55, 0.65, "inconclusive")):
        ratings = _ratings_with_r(key, low, high_r)
        out = import_with(ratings, f"{status}.csv")
        assert out.exit_code == 0, out.output
        (again,) = human_children(run_id)
        assert again.info.run_id == child.info.run_id
        expected = pearson(
            [ratings[s["sample_id"]] for s in key["samples"]],
            [s["delta"] for s in key["samples"]],
        )
        latest = c.get_run(child.info.run_id).data.metrics
        assert latest["human_r"] == pytest.approx(expected.r)
        assert tracking.get_run(run_id).data.tags["criterion.c4_human"] == status
        table = pd.read_json(
            c.download_artifacts(child.info.run_id, "human_ratings.json", str(tmp_path)),
            orient="split",
            dtype=False,
        )
        assert len(table) == 50
        assert dict(zip(table["sample_id"], table["human_rating"], strict=True)) == ratings
    history = c.get_metric_history(child.info.run_id, "human_r")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert len(human_children(run_id)) == 1


def test_guess_matching():
    assert guess_is_correct("Birds, probably", "bird genus", ["bird genus"])
    assert guess_is_correct("a bird genus", "bird genus", ["bird genus"])
    assert not guess_is_correct("genus", "bird genus", ["bird genus"])
    assert not guess_is_correct("fish", "bird genus", ["bird genus"])
    assert guess_is_correct("bushes", "shrub", ["shrub", "bush"])
    assert guess_is_correct("someone", "person", ["person", "individual", "someone"])
    assert not guess_is_correct("", "person", ["person"])
    assert not guess_is_correct("personal", "person", ["person"])


# --------------------------------------------------------------------------- real run


@pytest.fixture(scope="module")
def real_run(mlflow_store, embedded_lm, embedder, tmp_path_factory):
    from experiments.phase5 import run_phase5

    from experiments.config import load_config

    root = tmp_path_factory.mktemp("phase5_human")
    cfg = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=6",
            'generation.prompts=["Tell me about {concept}.", "Here is a story:"]',
            f"classifier.dir={root / 'cls'}",
            f"tracking.results_dir={root / 'res'}",
        ],
    )
    return run_phase5(cfg, lm=embedded_lm, embedder=embedder)


@pytest.mark.integration
def test_real_phase5_run_export_scripted_rate_import(real_run):
    from experiments.concepts import load_concepts
    from experiments.rating import scripted_rate

    run_id = real_run.run_id
    result = export_samples(run_id, n=9, seed=0)  # 12 generations in 6 cells
    assert result.csv_path.parent == real_run.results_dir / "human"
    assert len(result.cells) == 6 and set(result.cells.values()) == {1, 2}
    for strength in ("-1.000", "+0.000", "+1.000"):
        assert sum(v for k, v in result.cells.items() if k.endswith(strength)) == 3
    key = load_answer_key(result.key_path, run_id)
    children = {
        r.data.tags["cell"]: r.info.run_id
        for r in tracking.child_runs(run_id, "phase5-semantic-steering")
        if "cell" in r.data.tags
    }
    by_key = real_run.records.set_index("key")
    for entry in key["samples"]:
        assert children[entry["cell"]] == entry["child_run_id"]
        assert by_key.loc[entry["generation_key"], "delta"] == pytest.approx(entry["delta"])
    graph = load_concepts(DEFAULT_PATH)
    concepts = {c.synset: c for c in graph.concepts}
    path = scripted_rate(result.csv_path, key, concepts)
    res = import_ratings(path, run_id, min_rated=5)
    assert res.n_rated == 9
    assert res.criterion.status in {"pass", "inconclusive", "panel_required", "not_evaluable"}
    assert tracking.get_run(run_id).data.tags["criterion.c4_human"] == res.criterion.status
    assert len(human_children(run_id)) == 1
