"""Phase 5 Part A as small typed stages; :mod:`experiments.phase5.run` composes them.

``RunConfig → ConceptGraph → ProbeSet (probes) → VectorSet (vectors) →
GenerationPlan (plan) → generations.jsonl (generate) → scores.jsonl (score) →
CriteriaReport (analyse) → RunRecord + MLflow (publish)``
"""
