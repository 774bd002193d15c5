"""Criterion 4 of the seed design: human validation passes OR the judge panel agrees.

Part B (human) and Part C (panel) each record their verdict here, and the combined
criterion is recomputed from both every time, so re-recording replaces a verdict rather
than adding one. Where the verdicts live:

* on the Phase 5 parent run: tag ``criterion.<key>`` (the status), tag
  ``criterion.<key>.json`` (the whole result, so the other part can recombine later) and
  the ``criterion/<key>...`` metrics;
* in the run folder, when it is on this machine: ``criterion4.json`` and the run record
  (``steering_results.json``), whose ``criteria`` gain the three results.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from experiments import tracking
from experiments.rundir import RunDir, RunDirError

if TYPE_CHECKING:
    from experiments.record import RunRecord
    from metrics.criteria import CriterionResult

log = logging.getLogger(__name__)


def verdict_tag(key: str) -> str:
    """The parent-run tag holding a verdict's full result as JSON."""
    return f"criterion.{key}.json"


def stored_verdict(tags: Mapping[str, str], key: str) -> CriterionResult | None:
    """A verdict recorded earlier on the parent run (``key``: c4_human or c4_panel)."""
    from metrics.criteria import CriterionResult

    raw = tags.get(verdict_tag(key))
    return CriterionResult(**json.loads(raw)) if raw else None


def record_criterion4(
    run_id: str,
    human: CriterionResult | None = None,
    panel: CriterionResult | None = None,
    folder: RunDir | None = None,
    *,
    human_v2: CriterionResult | None = None,
    panel_v2: CriterionResult | None = None,
) -> CriterionResult:
    """Store Part B's and/or Part C's verdicts on the parent run and recombine criterion 4,
    both the seed's (point r) and v2 (r's cluster-bootstrap interval).

    ``None`` keeps what the run already has. ``folder`` defaults to the run's own folder;
    it is written only when it exists here. Returns the combined seed criterion 4.
    """
    from experiments.phase5.analyse import criteria_thresholds
    from metrics.criteria import (
        C4,
        C4_HUMAN,
        C4_PANEL,
        V2_C4,
        V2_C4_HUMAN,
        V2_C4_PANEL,
        combine_criterion4,
        combine_criterion4_v2,
        human_criterion,
        human_criterion_v2,
    )

    run = tracking.get_run(run_id)  # fresh tags: the other part may have recorded since
    c = tracking.client()
    stored: dict[str, CriterionResult] = {}
    given_parts = (
        (C4_HUMAN, human),
        (C4_PANEL, panel),
        (V2_C4_HUMAN, human_v2),
        (V2_C4_PANEL, panel_v2),
    )
    for key, given in given_parts:
        if given is not None:
            c.set_tag(run_id, verdict_tag(key), json.dumps(given.to_dict()))
            stored[key] = given
        elif (earlier := stored_verdict(run.data.tags, key)) is not None:
            stored[key] = earlier
    combined = combine_criterion4(
        stored.get(C4_HUMAN) or human_criterion(None), stored.get(C4_PANEL)
    )
    combined_v2 = combine_criterion4_v2(
        stored.get(V2_C4_HUMAN) or human_criterion_v2(None), stored.get(V2_C4_PANEL)
    )
    results = {**stored, C4: combined, V2_C4: combined_v2}
    for key, result in results.items():
        c.set_tag(run_id, f"criterion.{key}", result.status)
    # A criterion that became not evaluable must not keep an old pass/fail value.
    metrics = criterion4_metrics(results)
    tracking.log_metrics(run_id, {k: v for k, v in metrics.items() if v is not None})
    # The parts' thresholds are settings (parameters); the combined one is whichever
    # part decided, so it is not a fixed setting and stays in the tags' JSON only.
    tracking.log_new_params(
        run_id,
        {_v2_name(k): v for k, v in criteria_thresholds(stored).items()},
    )
    folder = folder if folder is not None else RunDir.locate(run)
    if folder.exists():
        folder.write_json(RunDir.CRITERION4, {k: v.to_dict() for k, v in results.items()})
        record = _update_record(folder, results)
        if record is not None:
            refresh_answer(run_id, folder, record)
    return combined


def refresh_answer(run_id: str, folder: RunDir, record: RunRecord) -> None:
    """The answer block follows criterion 4: ``answer.md``, its artefact and the top of
    the parent run's description are rewritten from the updated record."""
    from experiments.answer import with_answer
    from experiments.kernel.publisher import log_answer
    from experiments.phase5.report import write_answer

    text = log_answer(run_id, write_answer(folder, record))
    note = tracking.get_run(run_id).data.tags.get(tracking.NOTE_TAG, "")
    tracking.set_note(run_id, with_answer(note, text), whole=RunDir.SUMMARY)


def _v2_name(name: str) -> str:
    """``criterion/v2_c4_human...`` is logged as ``v2/criterion/v2_c4_human...``, beside
    the other v2 criteria; the seed's keys keep their names."""
    return f"v2/{name}" if name.startswith("criterion/v2_") else name


def criterion4_metrics(results: Mapping[str, CriterionResult]) -> dict[str, float | None]:
    """The verdict metrics of criterion 4's parts, seed names and v2 names."""
    from experiments.phase5.analyse import criteria_metrics

    return {_v2_name(k): v for k, v in criteria_metrics(dict(results)).items()}


def _update_record(folder: RunDir, results: Mapping[str, CriterionResult]) -> RunRecord | None:
    """Put the verdicts into the folder's run record, when it has a (typed) one; returns
    the updated record (None without one)."""
    from experiments.record import RecordError

    try:
        record = folder.read_record()
    except RunDirError:
        return None
    except RecordError as exc:  # an untyped record of an older run: left as it is
        log.info("criterion 4 not written into the run record: %s", exc)
        return None
    for result in results.values():
        record.set_criterion(result)
    folder.write_record(record)
    return record
