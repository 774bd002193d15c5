"""Phase 6 that identifies: detection quality varied on its own, and what it does to steering.

``steer-eval identify`` (``make identify``, ``configs/identify.yaml``); the run is
:func:`experiments.identify.study.run_identify`.
"""

# A smoke version: 4 development concepts, coarse grids, few short generations.
QUICK_OVERRIDES: tuple[str, ...] = (
    "identify.limit=4",
    "identify.theta_degrees=[0, 45, 90]",
    "identify.label_noise=[0, 0.25]",
    "identify.noise_seeds=[0]",
    "identify.logistic_c=[0.01, 1.0]",
    "identify.shrinkage=[1.0, 0.05]",
    "identify.sizes=['2x2x2', '16x16x16']",
    "identify.texts_per_concept=4",
    "identify.lens_positions=4",
    "identify.generated=['rotation:isotropic:0', 'rotation:isotropic:90']",
    "selection.beta_grid=[0.2]",
    "generation.max_new_tokens=8",
    "generation.samples_per_prompt=1",
    "criteria.n_boot=200",
)
