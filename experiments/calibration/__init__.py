"""Phase 6: the calibration study (how much detection quality does steering need?)."""

from pathlib import Path

# `--quick`: a smoke version (3 concepts, 2 training sizes, one source and seed, few short
# rows), a YAML overlay merged over the study's config (experiments.config.load_config).
QUICK = Path(__file__).resolve().parents[2] / "configs" / "quick" / "calibrate.yaml"
