"""identify's design checked by simulation before any compute: the toy studies with a
known answer (``simulate``) and the design they score (``design``, ``steer-eval identify
simulate``). They import ``identify.heldout``, ``identify.estimation`` and
``identify.stages``.
"""
