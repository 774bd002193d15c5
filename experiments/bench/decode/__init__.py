"""The generation sections on the CPU, ours side by side with what it replaces:
``batched`` (a), ``dtype``, ``peers``, ``roofline``, ``profile``, ``head``, ``tuning``,
``scaling`` and ``load``.

Imports only :mod:`experiments.bench.core`.
"""
