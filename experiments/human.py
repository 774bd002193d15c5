"""Phase 5 Part B: blind human validation of Δ (export, rate, import, correlate).

Why this shape:

* **Export** draws a seeded sample stratified over concept × strength from a finished
  Phase 5 run, so every cell of the design is represented (as evenly as possible) and
  the rating covers the whole range of Δ, not only the common middle. The CSV the rater
  sees carries no concept, strength, Δ or prompt; the answer key that maps sample ids
  back to child runs stays apart and carries a hash binding it to the run and to the
  exact texts, so a key from another export or run, or a hand-edited key, is refused.
* **CSV cells are untrusted** (generated text): cells that a spreadsheet would run as a
  formula (leading ``= + - @``, tab, CR) are prefixed with ``'``, every cell is quoted,
  control characters are replaced. Reading back undoes only that prefix.
* **Import** validates the whole file first (every bad row is named) and changes nothing
  (no files, no MLflow) unless the file is clean. It reuses one ``human-validation`` child
  run per parent, so re-importing a corrected file replaces the earlier figures.

Files (in ``results/phase5/<run id>/human/`` and as artefacts ``human/`` of the parent):

* ``human_validation.csv``: ``sample_id,concept,generated_text,human_rating`` with
  ``concept`` = ``REDACTED``, UTF-8 with BOM (Excel reads it as UTF-8), all cells quoted.
* ``answer_key.json``: see :func:`build_answer_key`.
* ``human_ratings.csv``: the interactive rater's working copy, the same columns plus
  ``topic_guess`` (see :mod:`experiments.rating`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
import random
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from experiments import tracking

log = logging.getLogger(__name__)

CSV_NAME = "human_validation.csv"
KEY_NAME = "answer_key.json"
RATINGS_NAME = "human_ratings.csv"
RESULT_NAME = "human_validation_result.json"
PLOT_NAME = "human_vs_delta.png"
TABLE_NAME = "human_ratings.json"
ARTIFACT_DIR = "human"
CHILD_RUN_NAME = "human-validation"
CHILD_PHASE = "5B"
REDACTED = "REDACTED"
CSV_COLUMNS = ("sample_id", "concept", "generated_text", "human_rating")
RATING_COLUMNS = (*CSV_COLUMNS, "topic_guess")
KEY_FORMAT = "steer-eval/human-answer-key"
KEY_FORMAT_VERSION = 1
DEFAULT_N = 50
DEFAULT_MIN_RATED = 20
RATING_MIN, RATING_MAX = 0, 10
DEFAULT_RESULTS_DIR = "results/phase5"

# A spreadsheet treats a cell starting with one of these as a formula (OWASP "CSV
# injection"); the full-width forms are included because some spreadsheets fold them.
FORMULA_TRIGGERS = frozenset("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Rank words shared by many concepts ("bird genus", "fish genus"): alone they do not
# identify a concept, so a topic guess of just "genus" is not counted as correct.
GENERIC_CONCEPT_WORDS = frozenset(
    {"genus", "genera", "order", "orders", "family", "class", "species", "kind", "type"}
)


class HumanValidationError(ValueError):
    """The human-validation input is wrong (file, run, key); the message says what and where."""


# --------------------------------------------------------------------------- cell safety


def neutralise(cell: str) -> str:
    """A cell that no spreadsheet will execute: control characters replaced, and a ``'``
    prefix when the cell (or its first non-blank character) could start a formula."""
    cell = _CONTROL.sub("\ufffd", cell)
    if cell[:1] in FORMULA_TRIGGERS or cell.lstrip()[:1] in FORMULA_TRIGGERS:
        return "'" + cell
    return cell


def restore(cell: str) -> str:
    """Undo :func:`neutralise`'s prefix (a spreadsheet may or may not have kept it)."""
    rest = cell[1:]
    if cell.startswith("'") and (
        rest[:1] in FORMULA_TRIGGERS or rest.lstrip()[:1] in FORMULA_TRIGGERS
    ):
        return rest
    return cell


def canonical_text(text: str) -> str:
    """The form texts are compared in: prefix undone, newlines unified, controls replaced,
    outer whitespace dropped (spreadsheets differ on all of these)."""
    text = restore(text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("\ufffd", text).strip()


def text_digest(text: str) -> str:
    return hashlib.sha256(canonical_text(text).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- file helpers


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding, newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def csv_text(columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> str:
    """All cells quoted and neutralised; written with a BOM by :func:`write_csv`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([neutralise("" if row.get(c) is None else str(row[c])) for c in columns])
    return buffer.getvalue()


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, csv_text(columns, rows), encoding="utf-8-sig")


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
    """Header and rows of a ratings CSV; HumanValidationError for a file that is not one."""
    path = Path(path)
    if not path.is_file():
        raise HumanValidationError(f"{path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise HumanValidationError(
            f"{path}: not UTF-8 text (bad byte 0x{raw[exc.start]:02x} at line {line}, byte "
            f"{exc.start}); save it from the spreadsheet as 'CSV UTF-8'"
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise HumanValidationError(f"{path}: empty file, expected a header row")
        header = [h.strip().lower() for h in header]
        duplicated = sorted({h for h in header if h and header.count(h) > 1})
        if duplicated:
            raise HumanValidationError(f"{path}: header repeats column(s) {duplicated}")
        missing = [c for c in required if c not in header]
        if missing:
            raise HumanValidationError(
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
                raise HumanValidationError(
                    f"{path}: row {number} (line {start}) has {len(values)} cells, the header "
                    f"has {len(header)}"
                )
            rows.append(CsvRow(number, start, dict(zip(header, values, strict=True))))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise HumanValidationError(
            f"{path}: malformed CSV at line {reader.line_num}: {exc}"
        ) from None
    return header, rows


# --------------------------------------------------------------------------- the Phase 5 run


def phase5_parent(run_id: str):
    """A finished Phase 5 parent run (``latest``: the newest one), or a clear error."""
    try:
        if run_id == "latest":
            run_id = tracking.latest_parent_run("phase5-semantic-steering")
        run = tracking.get_run(run_id)
    except LookupError as exc:
        raise HumanValidationError(str(exc)) from None
    tags = run.data.tags
    if tags.get("phase") != "5" or "mlflow.parentRunId" in tags:
        parent = tags.get("mlflow.parentRunId")
        hint = f"; its parent is {parent}" if parent else ""
        raise HumanValidationError(
            f"run {run_id} is not a Phase 5 parent run (phase tag {tags.get('phase')!r}{hint})"
        )
    if run.info.status != "FINISHED":
        raise HumanValidationError(
            f"run {run_id} is {run.info.status}, not FINISHED; finish it with "
            f"`steer-eval run --resume {run_id}`"
        )
    return run


def results_root(run, results_dir: str | Path | None = None) -> Path:
    """Where the run keeps local results: explicit, else its config, else the default."""
    if results_dir is not None:
        return Path(results_dir)
    return Path(run.data.params.get("config.tracking.results_dir", DEFAULT_RESULTS_DIR))


def human_dir(run, results_dir: str | Path | None = None) -> Path:
    return results_root(run, results_dir) / run.info.run_id / ARTIFACT_DIR


def _read_jsonl(text: str) -> list[dict]:
    from experiments.phase5 import parse_jsonl

    return parse_jsonl(text)


def load_generations(run, results_dir: str | Path | None = None) -> list[dict]:
    """The run's generation records: the local file, else the parent's MLflow artefact."""
    from experiments.phase5 import GENERATIONS_FILE

    local = results_root(run, results_dir) / run.info.run_id / GENERATIONS_FILE
    if local.exists():
        text = local.read_text(encoding="utf-8")
    else:
        import mlflow

        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = mlflow.artifacts.download_artifacts(
                    run_id=run.info.run_id, artifact_path=GENERATIONS_FILE, dst_path=tmp
                )
                text = Path(path).read_text(encoding="utf-8")
        except Exception as exc:
            raise HumanValidationError(
                f"run {run.info.run_id} has no {GENERATIONS_FILE} (neither {local} nor an "
                "MLflow artefact)"
            ) from exc
    by_key: dict[str, dict] = {}
    needed = ("key", "concept", "concept_name", "strength", "delta", "text", "prompt")
    for record in _read_jsonl(text):
        if all(k in record for k in needed) and record["delta"] is not None:
            by_key[record["key"]] = record
    if not by_key:
        raise HumanValidationError(f"run {run.info.run_id} has no scored generations")
    return [by_key[k] for k in sorted(by_key)]


def cell_key(synset: str, strength: float) -> str:
    """The ``cell`` tag Phase 5 puts on each concept × strength child run."""
    return f"{synset}|{float(strength):+.3f}"


def _children(run, filter_extra: str = "") -> list:
    c = tracking.client()
    flt = f"tags.mlflow.parentRunId = '{run.info.run_id}'" + filter_extra
    return c.search_runs([run.info.experiment_id], filter_string=flt, max_results=5000)


def cell_runs(run) -> dict[str, str]:
    """cell tag -> child run id for the parent's concept × strength runs."""
    return {r.data.tags["cell"]: r.info.run_id for r in _children(run) if "cell" in r.data.tags}


def _concept_lemmas(run) -> dict[str, list[str]]:
    """Lemmas per concept from the run's concept file (for topic-guess matching)."""
    from experiments.concepts import ConceptError, load_concepts

    path = run.data.params.get("config.concepts.file")
    try:
        graph = load_concepts(path) if path else load_concepts()
    except ConceptError:
        return {}
    return {c.synset: list(c.lemmas) for c in graph.concepts}


# --------------------------------------------------------------------------- sampling


def stratified_sample(records: Sequence[dict], n: int, seed: int) -> list[dict]:
    """``n`` records spread over concept × strength cells as evenly as possible.

    Cell counts differ by at most one (until a cell runs out); among equally filled
    cells the next draw goes to the concept and the strength with the fewest draws so far,
    so both margins stay balanced too. Within a cell, prompts are cycled. Seeded.
    """
    rng = random.Random(seed)
    cells: dict[tuple[str, float], list[dict]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r["key"]):
        cells[(record["concept"], float(record["strength"]))].append(record)
    queues: dict[tuple[str, float], list[dict]] = {}
    for cell in sorted(cells):
        by_prompt: dict[Any, list[dict]] = defaultdict(list)
        for record in cells[cell]:
            by_prompt[record.get("prompt_index")].append(record)
        groups = [by_prompt[k] for k in sorted(by_prompt, key=str)]
        for group in groups:
            rng.shuffle(group)
        rng.shuffle(groups)
        longest = max(len(g) for g in groups)
        queues[cell] = [g[i] for i in range(longest) for g in groups if i < len(g)]
    n = min(n, sum(len(q) for q in queues.values()))
    taken: dict[tuple[str, float], int] = dict.fromkeys(queues, 0)
    per_concept: dict[str, int] = defaultdict(int)
    per_strength: dict[float, int] = defaultdict(int)
    chosen: list[dict] = []
    while len(chosen) < n:
        open_cells = [c for c in sorted(queues) if taken[c] < len(queues[c])]
        cell = min(
            open_cells,
            key=lambda c: (taken[c], per_concept[c[0]], per_strength[c[1]], rng.random()),
        )
        chosen.append(queues[cell][taken[cell]])
        taken[cell] += 1
        per_concept[cell[0]] += 1
        per_strength[cell[1]] += 1
    rng.shuffle(chosen)
    return chosen


# --------------------------------------------------------------------------- answer key


def _key_body_hash(key: dict) -> str:
    body = {k: v for k, v in key.items() if k != "key_hash"}
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def build_answer_key(
    run_id: str,
    samples: Sequence[dict],
    children: dict[str, str],
    lemmas: dict[str, list[str]],
    seed: int,
    n_requested: int,
) -> dict:
    """The answer key: sample id -> where it came from, sealed by ``key_hash``.

    ``key_hash`` is SHA-256 over the canonical JSON of everything else in the key, which
    includes the run id and each sample's ``text_sha256`` (of the canonical text). It
    catches a key from another run or export and accidental edits; it is not a secret
    signature (anyone can recompute it after a deliberate edit).
    """
    width = max(3, len(str(len(samples))))
    entries = []
    for i, record in enumerate(samples, start=1):
        cell = cell_key(record["concept"], record["strength"])
        entries.append(
            {
                "sample_id": f"{i:0{width}d}",
                "child_run_id": children[cell],
                "cell": cell,
                "concept": record["concept"],
                "concept_name": record["concept_name"],
                "strength": float(record["strength"]),
                "prompt": record["prompt"],
                "prompt_index": record.get("prompt_index"),
                "sample": record.get("sample"),
                "delta": float(record["delta"]),
                "generation_key": record["key"],
                "text_sha256": text_digest(record["text"]),
            }
        )
    concepts = {}
    for entry in entries:
        synset = entry["concept"]
        concepts[synset] = {
            "name": entry["concept_name"],
            "lemmas": sorted(lemmas.get(synset, [entry["concept_name"]])),
        }
    cells: dict[str, int] = defaultdict(int)
    for entry in entries:
        cells[entry["cell"]] += 1
    key = {
        "format": KEY_FORMAT,
        "format_version": KEY_FORMAT_VERSION,
        "run_id": run_id,
        "seed": seed,
        "n_requested": n_requested,
        "n": len(entries),
        "csv_file": CSV_NAME,
        "stratification": dict(sorted(cells.items())),
        "concepts": dict(sorted(concepts.items())),
        "samples": entries,
    }
    key["key_hash"] = _key_body_hash(key)
    return key


def load_answer_key(path: Path, run_id: str | None = None) -> dict:
    """Read and verify an answer key file (format, hash, and the run it belongs to)."""
    path = Path(path)
    if not path.is_file():
        raise HumanValidationError(f"answer key {path} does not exist")
    return parse_answer_key(path.read_bytes(), str(path), run_id)


def parse_answer_key(data: bytes, source: str, run_id: str | None = None) -> dict:
    """Verify an answer key's format, its hash, and (when given) the run it belongs to."""
    try:
        key = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HumanValidationError(f"answer key {source} is not valid JSON: {exc}") from None
    if not isinstance(key, dict) or key.get("format") != KEY_FORMAT:
        raise HumanValidationError(f"{source} is not a steer-eval answer key")
    if key.get("format_version") != KEY_FORMAT_VERSION:
        raise HumanValidationError(
            f"{source}: answer key version {key.get('format_version')!r}, expected "
            f"{KEY_FORMAT_VERSION}"
        )
    if key.get("key_hash") != _key_body_hash(key):
        raise HumanValidationError(
            f"answer key {source} fails its hash check: it was edited after export; "
            "re-export or restore the original"
        )
    if run_id is not None and key.get("run_id") != run_id:
        raise HumanValidationError(
            f"answer key {source} belongs to run {key.get('run_id')}, not {run_id}"
        )
    return key


def key_samples(key: dict) -> dict[str, dict]:
    return {s["sample_id"]: s for s in key["samples"]}


# --------------------------------------------------------------------------- export


@dataclass
class ExportResult:
    run_id: str
    csv_path: Path
    key_path: Path
    n: int
    cells: dict[str, int]
    warnings: list[str] = field(default_factory=list)


def export_samples(
    run_id: str,
    n: int = DEFAULT_N,
    seed: int = 0,
    out: str | Path | None = None,
    results_dir: str | Path | None = None,
    force: bool = False,
) -> ExportResult:
    """Draw, blind and write the rating sample; log CSV and key under ``human/`` on the run."""
    if n < 1:
        raise HumanValidationError(f"--n must be at least 1, got {n}")
    run = phase5_parent(run_id)
    run_id = run.info.run_id  # "latest" resolved
    records = load_generations(run, results_dir)
    children = cell_runs(run)
    needed = {cell_key(r["concept"], r["strength"]) for r in records}
    missing = sorted(needed - set(children))
    if missing:
        raise HumanValidationError(
            f"run {run_id} has no child run for cell(s) {missing[:5]}; is the run complete?"
        )
    warnings = []
    if n > len(records):
        warnings.append(f"the run has only {len(records)} generations; exporting all of them")
    samples = stratified_sample(records, n, seed)
    key = build_answer_key(run_id, samples, children, _concept_lemmas(run), seed, n)
    folder = Path(out) if out is not None else human_dir(run, results_dir)
    key_path, csv_path = folder / KEY_NAME, folder / CSV_NAME
    if key_path.exists() and not force:
        try:
            old = json.loads(key_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        if old.get("key_hash") != key["key_hash"]:
            raise HumanValidationError(
                f"{folder} already holds a different export (ratings may be in progress); "
                "pass --force to replace it, or --out elsewhere"
            )
    if key_path.exists() and (folder / RATINGS_NAME).exists():
        old_hash = json.loads(key_path.read_text(encoding="utf-8")).get("key_hash", "old")
        if old_hash != key["key_hash"]:
            kept = folder / f"human_ratings.{str(old_hash)[:12]}.csv"
            os.replace(folder / RATINGS_NAME, kept)
            warnings.append(f"ratings of the replaced export were kept as {kept}")
    rows = [
        {
            "sample_id": entry["sample_id"],
            "concept": REDACTED,
            "generated_text": record["text"],
            "human_rating": "",
        }
        for entry, record in zip(key["samples"], samples, strict=True)
    ]
    write_csv(csv_path, CSV_COLUMNS, rows)
    atomic_write_text(key_path, json.dumps(key, indent=1, ensure_ascii=False) + "\n")
    c = tracking.client()
    c.log_artifact(run_id, str(csv_path), ARTIFACT_DIR)
    c.log_artifact(run_id, str(key_path), ARTIFACT_DIR)
    c.set_tag(run_id, "human.export", f"n={key['n']} seed={seed} key={key['key_hash'][:12]}")
    return ExportResult(run_id, csv_path, key_path, key["n"], key["stratification"], warnings)


def _artifact_bytes(run_id: str, artifact_path: str) -> bytes:
    """An artefact's content, read through a temporary download (nothing left behind)."""
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        path = mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=artifact_path, dst_path=tmp
        )
        return Path(path).read_bytes()


def _no_export(run_id: str) -> HumanValidationError:
    return HumanValidationError(
        f"run {run_id} has no human-validation export; run "
        f"`steer-eval human export --run {run_id}` first"
    )


def fetch_export(run, results_dir: str | Path | None = None) -> Path:
    """The local folder holding the run's export, restored from MLflow when absent here."""
    folder = human_dir(run, results_dir)
    if (folder / KEY_NAME).exists() and (folder / CSV_NAME).exists():
        return folder
    try:
        data = {
            n: _artifact_bytes(run.info.run_id, f"{ARTIFACT_DIR}/{n}") for n in (CSV_NAME, KEY_NAME)
        }
    except Exception as exc:
        raise _no_export(run.info.run_id) from exc
    parse_answer_key(data[KEY_NAME], f"{ARTIFACT_DIR}/{KEY_NAME}", run.info.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in data.items():
        if not (folder / name).exists():
            (folder / name).write_bytes(content)
    return folder


# --------------------------------------------------------------------------- parsing ratings


def parse_rating(raw: str) -> tuple[int | None, str | None]:
    """(rating, None), (None, None) when blank, or (None, reason) when invalid."""
    value = restore(raw).strip()
    if not value:
        return None, None
    try:
        number = int(value)
    except ValueError:
        try:
            as_float = float(value)
        except ValueError:
            return None, f"rating {raw!r} is not a number (expected an integer 0-10)"
        if not (math.isfinite(as_float) and as_float.is_integer()):
            return None, f"rating {raw!r} is not a whole number (expected an integer 0-10)"
        number = int(as_float)
    if not RATING_MIN <= number <= RATING_MAX:
        return None, f"rating {raw!r} is out of range (expected an integer 0-10)"
    return number, None


def normalise_sample_id(raw: str, known: dict[str, dict]) -> str:
    """Spreadsheets drop leading zeros ("007" -> "7"); map those back to the key's id."""
    value = restore(raw).strip()
    if value in known:
        return value
    if value.isdigit():
        for sid in known:
            if sid.isdigit() and int(sid) == int(value):
                return sid
    return value


@dataclass
class RatedSample:
    sample_id: str
    rating: int | None
    guess: str
    text: str


@dataclass
class ParsedRatings:
    rows: dict[str, RatedSample]
    problems: list[str]
    warnings: list[str]


def parse_ratings(path: Path, key: dict) -> ParsedRatings:
    """Validate a ratings CSV against the answer key; collect every problem by row."""
    header, rows = read_csv(path)
    known = key_samples(key)
    problems: list[str] = []
    warnings: list[str] = []
    extra = [h for h in header if h not in RATING_COLUMNS]
    if extra:
        warnings.append(f"ignoring extra column(s) {extra}")
    seen: dict[str, int] = {}
    parsed: dict[str, RatedSample] = {}
    for row in rows:
        where = row.where()
        raw_id = row.cells["sample_id"]
        sid = normalise_sample_id(raw_id, known)
        if not sid:
            problems.append(f"{where}: empty sample_id")
            continue
        if sid not in known:
            problems.append(
                f"{where}: unknown sample_id {raw_id.strip()!r} (not in the answer key)"
            )
            continue
        if sid in seen:
            problems.append(f"{where}: duplicate sample_id {sid!r} (first seen in row {seen[sid]})")
            continue
        seen[sid] = row.number
        text = row.cells["generated_text"]
        if text_digest(text) != known[sid]["text_sha256"]:
            problems.append(
                f"{where}: generated_text differs from the exported text for sample {sid} "
                "(edited, or a CSV from another export/run)"
            )
        rating, reason = parse_rating(row.cells["human_rating"])
        if reason:
            problems.append(f"{where}: {reason}")
        guess = canonical_text(row.cells.get("topic_guess", ""))
        parsed[sid] = RatedSample(sid, rating, guess, canonical_text(text))
    absent = [sid for sid in known if sid not in seen]
    if absent:
        warnings.append(
            f"{len(absent)} sample(s) missing from the file, treated as unrated: "
            + ", ".join(absent[:10])
            + (" …" if len(absent) > 10 else "")
        )
    return ParsedRatings(parsed, problems, warnings)


# --------------------------------------------------------------------------- topic guesses


def _stem(word: str) -> str:
    for suffix in ("ies", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def concept_match_words(name: str, lemmas: Iterable[str]) -> set[str]:
    """Stemmed words that identify a concept: whole names/lemmas (as phrases) and their
    content words of 4+ letters, minus rank words shared by many concepts (genus, order)."""
    words: set[str] = set()
    for phrase in [name, *lemmas]:
        tokens = re.findall(r"[a-z]+", phrase.replace("_", " ").lower())
        if not tokens:
            continue
        words.add(" ".join(_stem(t) for t in tokens))
        words.update(_stem(t) for t in tokens if len(t) >= 4 and t not in GENERIC_CONCEPT_WORDS)
    return words - {_stem(w) for w in GENERIC_CONCEPT_WORDS}


def guess_is_correct(guess: str, name: str, lemmas: Iterable[str]) -> bool:
    """A guess is correct when it word-matches the concept: one of its words (or word
    sequences), after lower-casing and plural stripping, equals the concept's name, a
    lemma, or a content word of either. "birds" matches bird genus; "genus" alone does not.
    """
    tokens = [_stem(t) for t in re.findall(r"[a-z]+", guess.lower())]
    if not tokens:
        return False
    targets = concept_match_words(name, lemmas)
    grams = {" ".join(tokens[i : i + k]) for k in (1, 2, 3) for i in range(len(tokens) - k + 1)}
    return bool(grams & targets)


# --------------------------------------------------------------------------- import


@dataclass
class ImportResult:
    run_id: str
    child_run_id: str
    n_samples: int
    n_rated: int
    pearson: Any
    spearman: Any
    guess_accuracy: float | None
    n_guessed: int
    criterion: Any
    combined: Any
    warnings: list[str]
    table: Any  # pandas DataFrame of the rated samples
    plot_path: Path | None = None


def _criteria_thresholds(run) -> tuple[float, float]:
    params = run.data.params
    try:
        return (
            float(params.get("config.criteria.human_r_pass", 0.7)),
            float(params.get("config.criteria.human_r_panel", 0.5)),
        )
    except ValueError:
        return 0.7, 0.5


def _answer_key_for(run, csv_path: Path, key_path: Path | None, results_dir) -> dict:
    """The verified key: explicit, else beside the CSV, else local export, else MLflow."""
    run_id = run.info.run_id
    if key_path is not None:
        return load_answer_key(Path(key_path), run_id)
    for candidate in (Path(csv_path).parent / KEY_NAME, human_dir(run, results_dir) / KEY_NAME):
        if candidate.is_file():
            return load_answer_key(candidate, run_id)
    try:
        data = _artifact_bytes(run_id, f"{ARTIFACT_DIR}/{KEY_NAME}")
    except Exception as exc:
        raise _no_export(run_id) from exc
    return parse_answer_key(data, f"MLflow artefact {ARTIFACT_DIR}/{KEY_NAME}", run_id)


def scatter_plot(table, correlation) -> Any:
    """Human rating against Δ, one colour per steering strength."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    strengths = sorted(table["strength"].unique())
    cmap = plt.get_cmap("coolwarm", max(len(strengths), 2))
    for i, s in enumerate(strengths):
        part = table[table["strength"] == s]
        ax.scatter(
            part["delta"],
            part["human_rating"],
            color=cmap(i),
            label=f"s = {s:+g}",
            alpha=0.8,
            edgecolor="black",
            linewidth=0.4,
        )
    title = "Human rating against Δ"
    if getattr(correlation, "evaluable", False):
        title += (
            f"\nPearson r = {correlation.r:.2f}, 95% CI [{correlation.ci_low:.2f}, "
            f"{correlation.ci_high:.2f}], n = {correlation.n}"
        )
    ax.set(xlabel="Δ = cos(core) − cos(neg)", ylabel="human rating (0-10)", title=title)
    ax.set_ylim(-0.5, 10.5)
    ax.legend(title="strength", fontsize=8)
    fig.tight_layout()
    return fig


def _find_child(run) -> str | None:
    runs = _children(run, f" and tags.phase = '{CHILD_PHASE}'")
    if not runs:
        return None
    runs = sorted(runs, key=lambda r: r.info.start_time)
    if len(runs) > 1:
        log.warning(
            "run %s has %d human-validation children; using the first", run.info.run_id, len(runs)
        )
    return runs[0].info.run_id


def _overwrite_table(child_id: str, table, name: str) -> None:
    """log_table appends to an existing table; write the same format ourselves instead."""
    c = tracking.client()
    existing = [f.path for f in c.list_artifacts(child_id)]
    if name not in existing:
        c.log_table(child_id, table, name)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        table.to_json(path, orient="split", index=False, date_format="iso")
        c.log_artifact(child_id, str(path))


def import_ratings(
    csv_path: str | Path,
    run_id: str,
    key_path: str | Path | None = None,
    min_rated: int = DEFAULT_MIN_RATED,
    results_dir: str | Path | None = None,
) -> ImportResult:
    """Validate a ratings CSV, correlate with Δ, log to the ``human-validation`` child run
    and update criterion 4 on the parent. Any invalid input raises before anything is
    written."""
    import pandas as pd

    from experiments.phase5 import record_criterion4
    from metrics.criteria import C4_HUMAN, CriterionResult, human_criterion
    from metrics.stats import pearson, spearman

    csv_path = Path(csv_path)
    if not csv_path.is_file():
        raise HumanValidationError(f"{csv_path}: no such file")
    run = phase5_parent(run_id)
    run_id = run.info.run_id  # "latest" resolved
    key = _answer_key_for(run, csv_path, key_path, results_dir)
    parsed = parse_ratings(csv_path, key)
    if parsed.problems:
        raise HumanValidationError(
            f"{csv_path}: {len(parsed.problems)} problem(s); nothing was imported:\n"
            + "\n".join(f"  - {p}" for p in parsed.problems)
        )
    samples = key_samples(key)
    rated = [r for r in parsed.rows.values() if r.rating is not None]
    warnings = list(parsed.warnings)
    if len(rated) < len(samples):
        warnings.append(f"only {len(rated)} of {len(samples)} samples are rated (partial ratings)")
    if len(rated) < min_rated:
        raise HumanValidationError(
            f"{csv_path}: {len(rated)} sample(s) rated; at least {min_rated} are needed to "
            "compute r (--min-rated); nothing was imported"
        )
    rows = []
    for r in sorted(rated, key=lambda r: r.sample_id):
        s = samples[r.sample_id]
        concept = key["concepts"].get(s["concept"], {"name": s["concept_name"], "lemmas": []})
        rows.append(
            {
                "sample_id": r.sample_id,
                "concept": s["concept"],
                "concept_name": s["concept_name"],
                "strength": s["strength"],
                "delta": s["delta"],
                "human_rating": r.rating,
                "topic_guess": r.guess,
                "guess_correct": (
                    guess_is_correct(r.guess, concept["name"], concept["lemmas"])
                    if r.guess
                    else None
                ),
                "child_run_id": s["child_run_id"],
                "generation_key": s["generation_key"],
                "text": r.text,
            }
        )
    table = pd.DataFrame(rows)
    corr = pearson(table["human_rating"].astype(float), table["delta"].astype(float))
    rho = spearman(table["human_rating"].astype(float), table["delta"].astype(float))
    guessed = table[table["topic_guess"] != ""]
    n_guessed = len(guessed)
    accuracy = float(guessed["guess_correct"].astype(bool).mean()) if n_guessed else None
    pass_r, panel_r = _criteria_thresholds(run)
    crit = human_criterion(corr, pass_r=pass_r, panel_r=panel_r)
    if crit.status in ("pass", "panel_required", "inconclusive", "not_evaluable"):
        crit = CriterionResult(
            C4_HUMAN,
            crit.description,
            crit.status,
            crit.value,
            crit.threshold,
            f"{crit.reason}; n = {len(table)} of {len(samples)} samples rated",
        )
    fig = scatter_plot(table, corr)

    # ---- everything validated and computed: now write.
    import matplotlib.pyplot as plt

    c = tracking.client()
    experiment = c.get_experiment(run.info.experiment_id).name
    child = _find_child(run)
    if child is None:
        child = tracking.start_run(
            experiment, CHILD_RUN_NAME, tags={"phase": CHILD_PHASE}, parent_run_id=run_id
        )
        imports = 1
    else:
        c.update_run(child, "RUNNING")
        imports = int(c.get_run(child).data.tags.get("human.imports", "0")) + 1
        for k, v in tracking.provenance_tags().items():
            c.set_tag(child, k, v)
    tags = {
        "human.imports": str(imports),
        "human.csv_sha256": hashlib.sha256(csv_path.read_bytes()).hexdigest(),
        "human.key_hash": key["key_hash"],
        "human.min_rated": str(min_rated),
        "human.evaluable": str(corr.evaluable).lower(),
        "criterion.c4_human": crit.status,
    }
    try:
        for k, v in tags.items():
            c.set_tag(child, k, v)
        metrics: dict[str, float | None] = {
            "n_samples": float(len(samples)),
            "n_rated": float(len(table)),
            "n_guessed": float(n_guessed),
            "guess_accuracy": accuracy,
            "human_r_evaluable": 1.0 if corr.evaluable else 0.0,
        }
        if corr.evaluable:
            metrics.update(
                {
                    "human_r": corr.r,
                    "human_r_p_value": corr.p_value,
                    "human_r_ci_low": corr.ci_low,
                    "human_r_ci_high": corr.ci_high,
                }
            )
        if rho.evaluable:
            metrics.update(
                {
                    "human_spearman": rho.r,
                    "human_spearman_ci_low": rho.ci_low,
                    "human_spearman_ci_high": rho.ci_high,
                }
            )
        # One step per import: the latest step is the current figure, earlier ones are history.
        tracking.log_metrics(child, metrics, step=imports)
        _overwrite_table(child, table, TABLE_NAME)
        c.log_figure(child, fig, f"plots/{PLOT_NAME}")
        summary = {
            "run_id": run_id,
            "child_run_id": child,
            "import": imports,
            "csv": str(csv_path),
            "key_hash": key["key_hash"],
            "n_samples": len(samples),
            "n_rated": len(table),
            "pearson": corr.to_dict(),
            "spearman": rho.to_dict(),
            "guess_accuracy": accuracy,
            "n_guessed": n_guessed,
            "criterion": crit.to_dict(),
            "warnings": warnings,
        }
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / RESULT_NAME
            path.write_text(json.dumps(summary, indent=1))
            c.log_artifact(child, str(path))
        tracking.end_run(child)
    except BaseException:
        tracking.end_run(child, "FAILED")
        raise
    combined = record_criterion4(
        run_id, human=crit, results_dir=str(results_root(run, results_dir))
    )
    local = human_dir(run, results_dir)
    plot_path = None
    if local.exists():
        summary["criterion4"] = combined.to_dict()
        atomic_write_text(local / RESULT_NAME, json.dumps(summary, indent=1) + "\n")
        plot_path = local / PLOT_NAME
        fig.savefig(plot_path, dpi=110)
    plt.close(fig)
    return ImportResult(
        run_id,
        child,
        len(samples),
        len(table),
        corr,
        rho,
        accuracy,
        n_guessed,
        crit,
        combined,
        warnings,
        table,
        plot_path,
    )


# --------------------------------------------------------------------------- CLI

RunOpt = Annotated[str, typer.Option("--run", help="the Phase 5 parent run id, or latest")]
ResultsOpt = Annotated[
    Path | None,
    typer.Option(help="local Phase 5 results folder (default: the run's own setting)"),
]


def register(app) -> None:
    """Add the ``human`` sub-app (export, rate, import) to the steer-eval CLI."""
    from rich.table import Table

    from experiments.cli.common import console, friendly

    human = typer.Typer(
        help="Phase 5 Part B: blind human validation of Δ (export, rate, import).",
        no_args_is_help=True,
    )

    @human.command("export")
    @friendly
    def export_cmd(
        run: RunOpt,
        n: Annotated[int, typer.Option("--n", help="samples to draw")] = DEFAULT_N,
        seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
        out: Annotated[
            Path | None, typer.Option(help="output folder (default results/phase5/<run>/human)")
        ] = None,
        results_dir: ResultsOpt = None,
        force: Annotated[bool, typer.Option(help="replace a different earlier export")] = False,
    ) -> None:
        """Draw a stratified, blinded sample to rate; write the CSV and its answer key."""
        result = export_samples(run, n=n, seed=seed, out=out, results_dir=results_dir, force=force)
        for warning in result.warnings:
            console.print(f"[yellow]warning:[/] {warning}")
        console.print(
            f"exported {result.n} samples from {len(result.cells)} concept × strength cells "
            f"(per cell: {min(result.cells.values())}-{max(result.cells.values())})"
        )
        console.print(f"rate:       {result.csv_path}")
        console.print(f"answer key: {result.key_path} (do not open it before rating)")
        console.print(f"logged under {ARTIFACT_DIR}/ of run {run}")

    @human.command("rate")
    @friendly
    def rate_cmd(
        csv_path: Annotated[
            Path | None, typer.Option("--csv", help="an exported human_validation.csv")
        ] = None,
        run: Annotated[str | None, typer.Option("--run", help="rate this run's export")] = None,
        key: Annotated[
            Path | None, typer.Option(help="answer key (default: beside the CSV)")
        ] = None,
        ratings: Annotated[
            Path | None,
            typer.Option(help=f"working copy to save to (default: {RATINGS_NAME} beside the CSV)"),
        ] = None,
        guess: Annotated[
            bool, typer.Option("--guess/--no-guess", help="ask for a topic guess first")
        ] = True,
        results_dir: ResultsOpt = None,
    ) -> None:
        """Rate the samples one at a time in the terminal; saves after every answer."""
        import sys

        from rich.console import Console

        from experiments.rating import prepare_ratings_file, rate_interactive

        if (csv_path is None) == (run is None):
            raise HumanValidationError("give exactly one of --csv PATH or --run RUN_ID")
        if run is not None:
            folder = fetch_export(phase5_parent(run), results_dir)
            csv_path = folder / CSV_NAME
        assert csv_path is not None
        key_file = Path(key) if key else csv_path.parent / KEY_NAME
        answer_key = load_answer_key(key_file, run)
        path = prepare_ratings_file(csv_path, answer_key, ratings)
        summary = rate_interactive(
            path, answer_key, guess=guess, stream=sys.stdin, console=Console(highlight=False)
        )
        if summary.rated >= DEFAULT_MIN_RATED:
            console.print(
                f"import with: steer-eval human import {path} --run {answer_key['run_id']}"
            )

    @human.command("import")
    @friendly
    def import_cmd(
        run: RunOpt,
        csv_path: Annotated[
            Path | None,
            typer.Argument(help="the rated CSV (default: the rater's file for this run)"),
        ] = None,
        key: Annotated[
            Path | None, typer.Option(help="answer key (default: beside the CSV, else MLflow)")
        ] = None,
        min_rated: Annotated[
            int, typer.Option(help="rated samples needed before r is computed")
        ] = DEFAULT_MIN_RATED,
        results_dir: ResultsOpt = None,
    ) -> None:
        """Validate ratings, correlate them with Δ and record criterion 4."""
        if csv_path is None:
            parent = phase5_parent(run)
            run = parent.info.run_id
            csv_path = human_dir(parent, results_dir) / RATINGS_NAME
        result = import_ratings(
            csv_path, run, key_path=key, min_rated=min_rated, results_dir=results_dir
        )
        for warning in result.warnings:
            console.print(f"[yellow]warning:[/] {warning}")
        table = Table("statistic", "value", "95% CI", "n", title="human rating vs Δ")
        for label, corr in (("Pearson r", result.pearson), ("Spearman ρ", result.spearman)):
            if corr.evaluable:
                table.add_row(
                    label, f"{corr.r:.3f}", f"[{corr.ci_low:.3f}, {corr.ci_high:.3f}]", str(corr.n)
                )
            else:
                table.add_row(label, "n/a", corr.reason, str(result.n_rated))
        if result.guess_accuracy is not None:
            table.add_row(
                "topic-guess accuracy", f"{result.guess_accuracy:.3f}", "", str(result.n_guessed)
            )
        console.print(table)
        console.print(
            f"criterion {result.criterion.key}: [bold]{result.criterion.status}[/] "
            f"({result.criterion.reason})",
            highlight=False,
        )
        console.print(
            f"criterion {result.combined.key}: [bold]{result.combined.status}[/]", highlight=False
        )
        console.print(f"logged to child run {result.child_run_id} ({CHILD_RUN_NAME})")

    app.add_typer(human, name="human")
