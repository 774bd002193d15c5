"""Phase 6: the calibration study (how much detection quality does steering need?)."""

# A smoke version: 3 concepts, 2 training sizes, one source and seed, few short rows.
QUICK_OVERRIDES: tuple[str, ...] = (
    "concepts.limit=3",
    "calibration.sizes=['1x1x1', '2x2x2']",
    "calibration.probe_seeds=[0]",
    "calibration.sources=['classifier']",
    "selection.beta_grid=[0.1, 0.2]",
    "generation.max_new_tokens=8",
    "generation.samples_per_prompt=1",
    "criteria.n_boot=200",
)
