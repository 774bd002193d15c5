"""The run folder's JSONL files survive a crash in the middle of an append."""

from __future__ import annotations

import json
import logging

from experiments.rundir import RunDir, append_jsonl, read_jsonl, repair_tail


def test_a_torn_last_line_is_cut_before_the_next_append(tmp_path, caplog):
    path = tmp_path / "generations.jsonl"
    append_jsonl(path, [{"key": "a"}, {"key": "b"}])
    with path.open("a") as handle:
        handle.write('{"key": "c", "te')  # the crash: half a record, no line break
    caplog.set_level(logging.WARNING, logger="experiments.rundir")
    assert [r["key"] for r in read_jsonl(path)] == ["a", "b"]
    assert "line 3 is not valid JSON" in caplog.text
    append_jsonl(path, [{"key": "c"}, {"key": "d"}])
    assert [r["key"] for r in read_jsonl(path)] == ["a", "b", "c", "d"]
    assert "line 3 is a torn write" in caplog.text
    assert path.read_text().count("\n") == 4


def test_a_whole_record_that_lost_its_line_break_is_kept(tmp_path):
    path = tmp_path / "scores.jsonl"
    path.write_text(json.dumps({"key": "a"}) + "\n" + json.dumps({"key": "b"}))
    repair_tail(path)
    append_jsonl(path, [{"key": "c"}])
    assert [r["key"] for r in read_jsonl(path)] == ["a", "b", "c"]


def test_a_corrupt_line_in_the_middle_is_named_and_skipped(tmp_path, caplog):
    path = tmp_path / "generations.jsonl"
    path.write_text('{"key": "a"}\nnot json\n{"key": "b"}\n')
    caplog.set_level(logging.WARNING, logger="experiments.rundir")
    assert [r["key"] for r in read_jsonl(path)] == ["a", "b"]
    assert f"{path} line 2 is not valid JSON" in caplog.text


def test_creating_the_folder_again_removes_interrupted_atomic_writes(tmp_path):
    run_dir = RunDir(tmp_path, "run").create()
    stale = run_dir.file(".scores.jsonl.abc.tmp")
    stale.write_text("half")
    kept = run_dir.file("scores.jsonl")
    kept.write_text("{}\n")
    run_dir.create()
    assert not stale.exists() and kept.exists()
