"""Scoring and statistics: embedder, semantic shift Δ, text checks, correlations, criteria.

Submodules are imported directly (``from metrics.semantic import score``) so that a light
import never pays for sentence-transformers.
"""
