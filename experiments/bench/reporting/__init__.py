"""What the results say, as plain tables (no rich and no torch): ``report`` (the CPU
comparisons and their targets) and ``gpu_report`` (section ``gpu``'s arms and targets).

Imports only :mod:`experiments.bench.core`.
"""
