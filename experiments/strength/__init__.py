"""The strength sweep (``steer-eval calibrate-strength``): a model's coherent range of β.

``range``: the record (:class:`~experiments.strength.range.StrengthRange`) kept with the
classifiers and the β a run takes from it; it sits in layer 1 (ARCHITECTURE.md), since
Phase 5, Phase 6 and identify read it. ``sweep``: the study that measures the range;
``publish``: its views. Nothing is imported here, so reading a range loads no sweep.
"""
