"""The ``steer-eval`` command line: one subcommand per job.

Each command module registers itself and imports heavy libraries (torch, transformers,
mlflow) only inside the command body, so ``steer-eval --help`` stays fast.
"""

from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(
    help="Does a concept classifier's F1 predict how well its direction steers a model?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# Modules with a ``register(app)``; the order is the order in ``--help``.
COMMAND_MODULES = (
    "experiments.cli.main",
    "experiments.cli.human",
    "experiments.cli.panel",
    "experiments.bench",
)

for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
