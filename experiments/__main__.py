"""``python -m experiments`` is the same as ``steer-eval``."""

from experiments.cli import app

app(prog_name="steer-eval")
