"""The ``steer-eval`` command line: one subcommand per job.

Each command module registers itself and imports heavy libraries (torch, transformers,
mlflow) only inside the command body, so ``steer-eval --help`` stays fast.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

if TYPE_CHECKING:  # typer carries its own click: the types its commands take
    from typer._click.core import Context, Parameter

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


def plain_flags(params: list[Parameter]) -> list[Parameter]:
    """``params`` with each flag's type shown as nothing: typer 0.29 prints ``<bool>``
    beside every flag in ``--help`` (``--json <bool>``), though a flag takes no value."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""  # what typer shows as the flag's type
    return params


class Command(TyperCommand):
    """A command whose help shows its flags, ``--help`` included, without a type."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return plain_flags(super().get_params(ctx))


class Group(TyperGroup):
    """``steer-eval`` and its command groups (``human``), flags shown as commands'."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return plain_flags(super().get_params(ctx))


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


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
