"""The strength sweep (``steer-eval calibrate-strength``): a model's coherent range of β.

The record (:class:`~experiments.strength_range.StrengthRange`) kept with the classifiers
and the β a run takes from it are ``experiments/strength_range.py``, in layer 1
(ARCHITECTURE.md), since Phase 5, Phase 6 and identify read it. ``sweep``: the study that
measures the range; ``publish``: its views. Nothing is imported here.
"""
