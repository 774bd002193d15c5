"""Cell safety: formula triggers neutralised on write, restored on read."""

from __future__ import annotations

import pytest

from experiments.rundir import FORMULA_TRIGGERS, neutralise, restore
from experiments.validation.errors import ValidationInputError
from experiments.validation.human.csvio import (
    CSV_COLUMNS,
    canonical_text,
    read_csv,
    write_csv,
)


def test_neutralise_round_trip(formula_payload):
    payload = formula_payload
    cell = neutralise(payload)
    assert cell[:1] not in FORMULA_TRIGGERS
    assert cell.startswith("'") == (payload[:1] in FORMULA_TRIGGERS)  # OWASP: the first one
    assert "\x1b" not in cell
    assert canonical_text(cell) == canonical_text(payload)
    assert restore(neutralise("safe text")) == "safe text"


def test_a_text_starting_with_a_space_or_a_line_break_is_left_as_it_is():
    """What a spreadsheet reads as a formula starts with = + - @, a tab or a carriage
    return (OWASP's CSV injection guidance); a model's continuation of its prompt often
    starts with a space or a line break, and is text: no prefix, read back the same."""
    for text in (" the dog", "\nThe dog", "   =1+2 after spaces", "\n=1+2"):
        assert neutralise(text) == text and restore(text) == text
    for text in ("=1+2", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "\uff1d1"):
        assert neutralise(text) == "'" + text and restore(neutralise(text)) == text
    assert restore("'\nThe dog") == "\nThe dog"  # as an earlier release wrote it
    assert restore("' =1") == " =1"


def test_written_csv_reads_back_with_row_numbers(tmp_path):
    path = tmp_path / "x.csv"
    rows = [
        {"sample_id": "001", "concept": "REDACTED", "generated_text": "=1+1", "human_rating": ""},
        {"sample_id": "002", "concept": "REDACTED", "generated_text": "a\nb", "human_rating": "3"},
    ]
    write_csv(path, CSV_COLUMNS, rows)
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")  # BOM: Excel reads UTF-8
    header, read = read_csv(path)
    assert header == list(CSV_COLUMNS)
    assert [r.number for r in read] == [1, 2] and [r.line for r in read] == [2, 3]
    assert restore(read[0].cells["generated_text"]) == "=1+1"
    assert read[1].where() == "row 2 (line 3, sample_id '002')"
    (tmp_path / "dup.csv").write_text("sample_id,sample_id\n1,2\n")
    with pytest.raises(ValidationInputError, match="repeats column"):
        read_csv(tmp_path / "dup.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValidationInputError, match="empty file"):
        read_csv(tmp_path / "empty.csv")
