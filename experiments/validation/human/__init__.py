"""Phase 5 Part B: blind human validation of Δ (export, rate, import, correlate).

Each module says why it works as it does: :mod:`.export` draws a seeded sample stratified
over concept × strength (:mod:`.sample`) from a finished Phase 5 run and writes the blind
CSV, its cells untrusted text written so no spreadsheet runs them (:mod:`.csvio`), and
the answer key, kept apart and sealed to the run and the exact texts (:mod:`.answer_key`);
:mod:`.rater` rates in a working copy saved after every answer, which :mod:`.ratings`
checks against the key; :mod:`.importer` validates the whole file before it changes
anything, and reuses one ``human-validation`` child run per parent.

Files (in ``<run folder>/human/`` and as artefacts ``human/`` of the parent): the blind
``human_validation.csv`` (``concept`` = ``REDACTED``), ``answer_key.json`` and the
rater's working copy ``human_ratings.csv`` (the same columns plus ``topic_guess``).
"""
