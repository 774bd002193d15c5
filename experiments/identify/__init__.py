"""Phase 6 that identifies: detection quality varied on its own, and what it does to steering.

``steer-eval identify`` (``make identify``, ``configs/identify.yaml``); the run is
:func:`experiments.identify.study.run_identify`.
"""

from pathlib import Path

# `--quick`: a smoke version (4 development concepts, coarse grids, few short generations),
# a YAML overlay merged over the study's config (experiments.config.load_config).
QUICK = Path(__file__).resolve().parents[2] / "configs" / "quick" / "identify.yaml"
