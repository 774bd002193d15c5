"""Phase 5 Part B: blind human validation of Δ (export, rate, import, correlate).

Why this shape:

* **Export** (:mod:`.export`) draws a seeded sample stratified over concept × strength
  (:mod:`.sample`) from a finished Phase 5 run, so every cell of the design is
  represented and the rating covers the whole range of Δ. The CSV the rater sees
  carries no concept, strength, Δ or prompt; the answer key (:mod:`.answer_key`) that
  maps sample ids back to child runs stays apart and carries a hash binding it to the
  run and to the exact texts, so a key from another export or run, or a hand-edited
  key, is refused.
* **CSV cells are untrusted** generated text (:mod:`.csvio`): cells a spreadsheet would
  run as a formula are prefixed with ``'``, every cell is quoted, control characters are
  replaced. Reading back undoes only that prefix.
* **Rating** (:mod:`.rater`) happens in a working copy that is saved after every answer;
  :mod:`.ratings` parses and checks a rated file against the key.
* **Import** (:mod:`.importer`) validates the whole file first (every bad row is named)
  and changes nothing (no files, no MLflow) unless the file is clean. It reuses one
  ``human-validation`` child run per parent, so re-importing a corrected file replaces
  the earlier figures.

Files (in ``<run folder>/human/`` and as artefacts ``human/`` of the parent):

* ``human_validation.csv``: ``sample_id,concept,generated_text,human_rating`` with
  ``concept`` = ``REDACTED``, UTF-8 with BOM (Excel reads it as UTF-8), all cells quoted.
* ``answer_key.json``: see :func:`.answer_key.build_answer_key`.
* ``human_ratings.csv``: the rater's working copy, the same columns plus ``topic_guess``.
"""
