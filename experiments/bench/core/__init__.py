"""What every bench section stands on: ``options`` (what to measure; no torch, the CLI
imports it for ``--help``), ``measure`` (medians, interleaving, load average, the
machine) and ``workload`` (the rows, and the only door into the Phase 5 pipeline).

Imports no other bench sub-package.
"""
