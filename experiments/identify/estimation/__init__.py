"""What identify estimates from what its stages measured: the tables (``cells``), the
within-concept statistics (``stats``), the estimators and estimands (``analysis``,
``estimator``, ``corrected``, ``estimands``, ``dose``, ``families``, ``multiplicity``),
the variance components the toys take (``variance``), the cross-checks against generated
texts and a judge's rubric (``crosscheck``, ``rubric``), the Phase 6 re-analysis
(``phase6``) and v1 against v2 (``compare``). They import ``identify.stages`` and nothing
else of ``identify``.
"""
