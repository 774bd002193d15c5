"""The ``steer-eval`` command line: one subcommand per job.

Each command module registers itself and imports heavy libraries (torch, transformers,
mlflow) only inside the command body, so ``steer-eval --help`` stays fast.
"""

from __future__ import annotations

import importlib

import typer
from typer.core import TyperCommand

from experiments.cli.common import Command, Group

app = typer.Typer(
    help="Does a concept classifier's F1 predict how well its direction steers a model?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib import metadata

        try:
            version = metadata.version("steer-eval")
        except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
            version = "unknown (not installed)"
        typer.echo(f"steer-eval {version}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Options of steer-eval itself (its subcommands do the work)."""


# Modules with a ``register(app)``; the order is the order in ``--help``.
COMMAND_MODULES = (
    "experiments.cli.main",
    "experiments.cli.classifiers",
    "experiments.cli.calibrate",
    "experiments.cli.strength",
    "experiments.cli.human",
    "experiments.cli.panel",
    "experiments.cli.export",
    "experiments.cli.samples",
    "experiments.cli.identify",
    "experiments.cli.runs",
    "experiments.cli.ui",
    "experiments.cli.bench",
)

for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


def _plain_flags(typer_app: typer.Typer) -> None:
    """Every command and group of ``typer_app`` and its groups: a :class:`Command` or
    :class:`Group` (typer builds them when the app is called)."""
    typer_app.info.cls = Group
    for info in typer_app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = Command
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _plain_flags(group.typer_instance)


_plain_flags(app)
