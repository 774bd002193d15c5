"""The rating session: blind, saves after every answer, resumes, refuses a foreign copy."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from experiments.validation.errors import ValidationInputError
from experiments.validation.human.answer_key import key_body_hash, key_samples, load_answer_key
from experiments.validation.human.csvio import CSV_COLUMNS, RATINGS_NAME


def test_rater_flow_rate_skip_back_quit_resume(exported, kit):
    from experiments.cli import app

    run_id, result, key, _ = exported
    samples = key_samples(key)
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
    ratings = result.csv_path.parent / RATINGS_NAME
    rows = {r["sample_id"]: r for r in kit.read_export(ratings)}
    assert [rows[s]["human_rating"] for s in ("001", "002", "003", "004")] == ["7", "3", "5", ""]
    assert [rows[s]["topic_guess"] for s in ("001", "002", "003")] == ["a bird", "dunno", "x"]
    assert "out of range" in out.output and "not a number" in out.output
    assert f"relate to {samples['001']['concept_name']}?" in out.output
    assert "3/50 rated" in out.output
    for hidden in ("Δ", "delta", "+1.000", "strength s", samples["001"]["child_run_id"]):
        assert hidden not in out.output
    assert "[bold]markup[/bold]" in out.output or "markup" not in out.output
    # The export itself is untouched; the working copy has the extra column.
    assert {r["human_rating"] for r in kit.read_export(result.csv_path)} == {""}
    assert list(rows["001"]) == [*CSV_COLUMNS, "topic_guess"]

    # Resume without guesses: starts at 004; back to 003 and Enter keeps its rating.
    session2 = "\n".join(["b", "", "8", "s"])  # then EOF = quit
    out = runner.invoke(
        app, ["human", "rate", "--run", run_id, "--no-guess"], input=session2 + "\n"
    )
    assert out.exit_code == 0, out.output
    assert "current rating: 5" in out.output and "What is this text about" not in out.output
    rows = {r["sample_id"]: r for r in kit.read_export(ratings)}
    assert [rows[s]["human_rating"] for s in ("003", "004", "005")] == ["5", "8", ""]
    assert "saved 4/50 rated" in out.output


def test_rater_saves_after_every_answer_and_finishes(exported, kit):
    import io

    from rich.console import Console

    from experiments.cli.rater import TerminalRater
    from experiments.validation.human.rater import prepare_ratings_file, rate

    _, result, key, _ = exported
    path = prepare_ratings_file(result.csv_path, key)
    saved: list[int] = []

    def on_save(items):
        saved.append(sum(i.rating is not None for i in items))
        on_disk = kit.read_export(path)
        assert sum(r["human_rating"] != "" for r in on_disk) == saved[-1]

    answers = io.StringIO("\n".join(["6"] * 49 + ["s"]) + "\n")
    console = Console(file=io.StringIO(), width=100)
    summary = rate(path, key, False, TerminalRater(console, answers), on_save=on_save)
    assert saved[:3] == [1, 2, 3] and summary.rated == 49 and summary.skipped == ["050"]
    assert not summary.quit
    summary = rate(path, key, False, TerminalRater(console, io.StringIO("4\n")))
    assert summary.rated == 50 and "all done" in console.file.getvalue()
    # A working copy from a different export is refused, not silently mixed.
    other = load_answer_key(result.key_path)
    other["samples"][0]["text_sha256"] = "0" * 64
    other["key_hash"] = key_body_hash(other)
    with pytest.raises(ValidationInputError, match="does not match the answer key"):
        prepare_ratings_file(result.csv_path, other)


# --------------------------------------------------------------------------- import
