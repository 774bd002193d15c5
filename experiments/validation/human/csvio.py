"""CSV files a spreadsheet can open safely, and reading them back with row numbers.

Generated text is untrusted: a cell that a spreadsheet would run as a formula (leading
``= + - @``, tab, CR; OWASP "CSV injection") is prefixed with ``'``, every cell is
quoted and control characters are replaced. Reading back undoes only that prefix, and
every problem names the file, row and line, because a person has to fix it by hand.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.rundir import CONTROL_CHARS, atomic_write_text, neutralise, restore
from experiments.validation.errors import ValidationInputError

CSV_NAME = "human_validation.csv"  # the blind export
RATINGS_NAME = "human_ratings.csv"  # the rater's working copy
REDACTED = "REDACTED"
CSV_COLUMNS = ("sample_id", "concept", "generated_text", "human_rating")
RATING_COLUMNS = (*CSV_COLUMNS, "topic_guess")

# Cell safety (neutralise, restore) lives with the run folder's files, so every CSV the
# suite writes (this export, criteria.csv) uses the same rules.


def canonical_text(text: str) -> str:
    """The form texts are compared in: prefix undone, newlines unified, controls replaced,
    outer whitespace dropped (spreadsheets differ on all of these)."""
    text = restore(text).replace("\r\n", "\n").replace("\r", "\n")
    return CONTROL_CHARS.sub("\ufffd", text).strip()


def text_digest(text: str) -> str:
    """SHA-256 of the canonical text: binds the answer key to the exact exported texts."""
    return hashlib.sha256(canonical_text(text).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- writing


def csv_text(columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> str:
    """All cells quoted and neutralised; written with a BOM by :func:`write_csv`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([neutralise("" if row.get(c) is None else str(row[c])) for c in columns])
    return buffer.getvalue()


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """Atomic write, UTF-8 with BOM so Excel reads it as UTF-8."""
    atomic_write_text(path, csv_text(columns, rows), encoding="utf-8-sig")


# --------------------------------------------------------------------------- reading


@dataclass
class CsvRow:
    """One data row with where it came from, for error messages."""

    number: int  # 1-based data row
    line: int  # physical line where the record starts
    cells: dict[str, str]

    def where(self) -> str:
        sid = self.cells.get("sample_id", "").strip()
        return f"row {self.number} (line {self.line}" + (f", sample_id {sid!r})" if sid else ")")


def read_csv(path: Path, required: Sequence[str] = CSV_COLUMNS) -> tuple[list[str], list[CsvRow]]:
    """Header and rows of a ratings CSV; ValidationInputError for a file that is not one."""
    path = Path(path)
    if not path.is_file():
        raise ValidationInputError(f"{path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ValidationInputError(
            f"{path}: not UTF-8 text (bad byte 0x{raw[exc.start]:02x} at line {line}, byte "
            f"{exc.start}); save it from the spreadsheet as 'CSV UTF-8'"
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise ValidationInputError(f"{path}: empty file, expected a header row")
        header = [h.strip().lower() for h in header]
        duplicated = sorted({h for h in header if h and header.count(h) > 1})
        if duplicated:
            raise ValidationInputError(f"{path}: header repeats column(s) {duplicated}")
        missing = [c for c in required if c not in header]
        if missing:
            raise ValidationInputError(
                f"{path}: missing column(s) {missing}; the header is {header} and must hold "
                f"{list(required)}"
            )
        rows: list[CsvRow] = []
        start = reader.line_num + 1
        for values in reader:
            if not any(v.strip() for v in values):
                start = reader.line_num + 1
                continue
            number = len(rows) + 1
            if len(values) != len(header):
                raise ValidationInputError(
                    f"{path}: row {number} (line {start}) has {len(values)} cells, the header "
                    f"has {len(header)}"
                )
            rows.append(CsvRow(number, start, dict(zip(header, values, strict=True))))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise ValidationInputError(
            f"{path}: malformed CSV at line {reader.line_num}: {exc}"
        ) from None
    return header, rows
