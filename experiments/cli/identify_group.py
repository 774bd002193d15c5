"""``steer-eval identify``'s command group: its old flag forms, and bad combinations named.

Before ``identify run|simulate|pool|compare`` one command took every option and a flag
chose what it did: ``--simulate``, ``--compare <folder>``, ``--pool`` (``--exploratory``
with it), else a run. :class:`IdentifyGroup` still takes those forms: :func:`legacy_args`
rewrites them to the command's arguments, and a one-line note on stderr names the new
form. An option given to a command that does not take it is refused (exit 2) naming the
command that does.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import typer

from experiments.cli.common import Group

if TYPE_CHECKING:
    from typer._click.core import Context

# The flag that chose each command before there were commands, in the order the old
# code tested them; with none of them, ``run``.
LEGACY_MODES = {"--simulate": "simulate", "--compare": "compare", "--pool": "pool"}
MODE_FLAGS = {*LEGACY_MODES, "--no-simulate", "--no-pool"}
# What ``--pool`` refused (an error, exit 2) rather than ignored: kept in the new form,
# so that ``pool`` refuses them still.
POOL_REFUSED = frozenset({"--shard", "--set", "-s", "--model", "--concepts", "--quick"})


def _option_name(arg: str) -> str | None:
    """The option a token names (``--set=x`` → ``--set``, ``-cX`` → ``-c``), or None."""
    if arg.startswith("--"):
        return arg.split("=", 1)[0]
    return arg[:2] if arg.startswith("-") and len(arg) > 1 else None


def _items(args: list[str], takes_value: dict[str, bool]) -> list[tuple[str | None, list[str]]]:
    """``args`` cut into (option name, its tokens): an option with its value, a bare
    token with None; everything from ``--`` on is one item."""
    items: list[tuple[str | None, list[str]]] = []
    i = 0
    while i < len(args):
        name = _option_name(args[i])
        if args[i] == "--":
            items.append((None, args[i:]))
            break
        width = 2 if name is not None and args[i] == name and takes_value.get(name) else 1
        items.append((name, args[i : i + width]))
        i += width
    return items


def legacy_args(
    args: list[str], options: dict[str, dict[str, bool]]
) -> tuple[list[str], list[str]]:
    """An old flag form's arguments as its command's, and the options left out.

    ``options``: each command's options (name → takes a value). The command is the
    first of ``--simulate``, ``--compare <folder>`` (the folder its argument) and
    ``--pool`` given, else ``run``. An option of the old form that its command does not
    take did nothing there before and is left out (named in the second list), except
    those ``--pool`` refused (:data:`POOL_REFUSED`), left in for ``pool`` to refuse;
    anything else (a misspelt option) is kept for the command to reject as before."""
    known = {name: value for taken in options.values() for name, value in taken.items()}
    items = _items(args, {**known, "--compare": True})
    given = {name for name, _ in items}
    command = next((c for flag, c in LEGACY_MODES.items() if flag in given), "run")
    taken = options.get(command, {})
    kept: list[str] = []
    dropped: list[str] = []
    folder: list[str] = []  # compare's argument: --compare's value (the last given)
    for name, tokens in items:
        if name == "--compare" and command == "compare":
            folder = [tokens[0].split("=", 1)[1]] if "=" in tokens[0] else tokens[1:]
        elif name in MODE_FLAGS:  # the command's own flag, or its default --no-x: said
            if name != f"--{command}" and not name.startswith("--no-"):
                dropped.append(name)
        elif (
            name in known and name not in taken and not (command == "pool" and name in POOL_REFUSED)
        ):
            dropped.append(name)
        else:
            kept += tokens
    return [command, *folder, *kept], dropped


def option_table(command: Any) -> dict[str, bool]:
    """A click command's options: each name (``--no-x`` too) → whether it takes a value."""
    return {
        name: not param.is_flag
        for param in command.params
        if param.param_type_name == "option"
        for name in (*param.opts, *param.secondary_opts)
    }


class IdentifyGroup(Group):
    """``identify``'s commands, taking the old flag forms too (:func:`legacy_args`, with
    a one-line note on stderr naming the new form), and naming the command an option
    belongs to when another command is given it."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if not args or (args[0].startswith("-") and args[0] not in ctx.help_option_names):
            options = {name: option_table(cmd) for name, cmd in self.commands.items()}
            new, dropped = legacy_args(args, options)
            if not ctx.resilient_parsing:
                left = f" ({', '.join(dropped)} did nothing there: left out)" if dropped else ""
                before = shlex.join(["steer-eval", "identify", *args])
                now = shlex.join(["steer-eval", "identify", *new])
                typer.echo(f"note: `{before}` is now `{now}`{left}", err=True)
            args = new
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Context) -> Any:
        from typer._click.exceptions import NoSuchOption

        try:
            return super().invoke(ctx)
        except NoSuchOption as exc:
            command = exc.ctx.info_name if exc.ctx is not None else None
            owners = [
                f"`identify {name}`"
                for name, cmd in self.commands.items()
                if name != command and exc.option_name in option_table(cmd)
            ]
            if command and owners:
                exc.message = (
                    f"`identify {command}` takes no {exc.option_name}: it is an option of "
                    f"{' and '.join(owners)}"
                )
            raise
