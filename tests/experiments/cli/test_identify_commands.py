"""``steer-eval identify run|simulate|pool|compare`` and the flag forms they replace.

Each old form (``identify --simulate``, ``--pool [--exploratory]``, ``--compare <folder>``,
``--heldout --shard K``, ``--resume ID``, ``--dry-run``, or no command) is rewritten to
its command's arguments (:func:`legacy_args`) and says the new form in one line on
stderr; both forms then run the same command on the same arguments, so their output is
the same. A bad combination is refused with exit 2, naming the command that takes the
option. The real CLI throughout (typer's CliRunner), nothing of the project's replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from experiments.cli import app
from experiments.cli.identify_group import legacy_args

runner = CliRunner()


def _options() -> dict[str, dict[str, bool]]:
    """identify's commands' options as the group reads them (name → takes a value)."""
    from experiments.cli.identify_group import option_table

    group = typer.main.get_command(app).commands["identify"]  # type: ignore[attr-defined]
    return {name: option_table(cmd) for name, cmd in group.commands.items()}


@pytest.mark.parametrize(
    ("old", "new", "dropped"),
    [
        ([], ["run"], []),
        (
            ["--config", "c.yaml", "--heldout", "--shard", "0"],
            ["run", "--config", "c.yaml", "--heldout", "--shard", "0"],
            [],
        ),
        (["--resume", "abc"], ["run", "--resume", "abc"], []),
        (["--quick", "--dry-run", "--json"], ["run", "--quick", "--dry-run", "--json"], []),
        (["-c", "c.yaml", "--pool"], ["pool", "-c", "c.yaml"], []),
        (["--pool", "--exploratory", "--json"], ["pool", "--exploratory", "--json"], []),
        (["--pool", "--dry-run", "--heldout"], ["pool"], ["--dry-run", "--heldout"]),
        (["--pool", "--shard", "0"], ["pool", "--shard", "0"], []),  # refused, as before
        (
            ["--set", "a=1", "--simulate", "--toys", "3", "--quick", "--power-at=6,10"],
            ["simulate", "--set", "a=1", "--toys", "3", "--power-at=6,10"],
            ["--quick"],
        ),
        (["--simulate", "--pool", "--compare", "x"], ["simulate"], ["--pool", "--compare"]),
        (
            ["--json", "--compare", "runs/x", "-c", "c.yaml"],
            ["compare", "runs/x", "--json"],
            ["-c"],
        ),
        (["--compare=runs/x"], ["compare", "runs/x"], []),
        (["--exploratory", "--concepts", "-1"], ["run", "--concepts", "-1"], ["--exploratory"]),
        (["--no-such", "1"], ["run", "--no-such", "1"], []),  # the command rejects it
    ],
)
def test_each_old_form_becomes_its_command(old, new, dropped) -> None:
    assert legacy_args(old, _options()) == (new, dropped)


def test_the_commands_and_their_help() -> None:
    out = runner.invoke(app, ["identify", "--help"])
    assert out.exit_code == 0 and "note:" not in out.output
    for command in ("run", "simulate", "pool", "compare"):
        assert command in out.stdout
        help_ = runner.invoke(app, ["identify", command, "--help"])
        assert help_.exit_code == 0 and "note:" not in help_.output
    # an old form asking for help gets its command's
    out = runner.invoke(app, ["identify", "--simulate", "--help"])
    assert out.exit_code == 0 and "--power-at" in out.stdout and "--heldout" not in out.stdout


def _note(out) -> str:
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("note:")]
    return line


def test_simulate_old_and_new_write_the_same_design(tmp_path) -> None:
    """``identify --simulate`` and ``identify simulate`` on v2's config with two toys:
    the same table, seed and hash, each written to its results folder."""
    results = []
    for form, args in (
        ("old", ["identify", "--config", "configs/identify-v2.yaml", "--simulate"]),
        ("new", ["identify", "simulate", "--config", "configs/identify-v2.yaml"]),
    ):
        where = tmp_path / form
        rest = ["--toys", "2", "--primary-only", "--json", "--set", f"identify.results_dir={where}"]
        out = runner.invoke(app, [*args, *rest])
        assert out.exit_code == 0, out.output
        result = json.loads(out.stdout)
        assert [str(p).startswith(str(where)) for p in result.pop("files")] == [True, True]
        results.append(result)
        if form == "old":
            old = " ".join(["steer-eval", *args, *rest])
            new = " ".join(
                ["steer-eval identify simulate --config configs/identify-v2.yaml", *rest]
            )
            assert _note(out) == f"note: `{old}` is now `{new}`"
        else:
            assert "note:" not in out.stderr
    assert results[0] == results[1]
    assert results[0]["toys_per_class_and_arm"] == 2


def test_the_dry_run_old_and_new_plan_alike(mlflow_store) -> None:
    """``identify --quick --dry-run`` is ``identify run --quick --dry-run``."""
    old = runner.invoke(app, ["identify", "--quick", "--dry-run", "--json"])
    new = runner.invoke(app, ["identify", "run", "--quick", "--dry-run", "--json"])
    assert old.exit_code == new.exit_code == 0, old.output + new.output
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert json.loads(new.stdout)["phase"] == "6-identify"
    assert "`steer-eval identify run --quick --dry-run --json`" in _note(old)
    assert "note:" not in new.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["--pool"], ["pool"]),
        (["--pool", "--exploratory"], ["pool", "--exploratory"]),
        (
            ["--heldout", "--shard", "0", "--resume", "x"],
            ["run", "--heldout", "--shard", "0", "--resume", "x"],
        ),
        (["--heldout", "--quick"], ["run", "--heldout", "--quick"]),
        (["--simulate", "--power-at", "a,b"], ["simulate", "--power-at", "a,b"]),
    ],
)
def test_old_and_new_forms_refuse_alike(old, new, tmp_path) -> None:
    """Refusals from the commands' own checks and the pooled study's (configs/identify.yaml,
    its shards looked for in an empty folder, is not sharded and has no pooled primary):
    the same message, exit 2, in either form."""
    import yaml

    data = yaml.safe_load(Path("configs/identify.yaml").read_text(encoding="utf-8"))
    data["identify"]["shards_dir"] = str(tmp_path / "shards")
    config = tmp_path / "identify.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    said = []
    for args in (old, new):
        out = runner.invoke(app, ["identify", *args, "--config", str(config)])
        assert out.exit_code == 2, out.output
        said.append([x for x in out.stderr.splitlines() if not x.startswith("note:")])
    assert said[0] == said[1] and said[0][0].startswith("error:")


def test_compare_old_and_new_read_the_same_folder(tmp_path) -> None:
    """``--compare <folder>`` is ``compare <folder>``; --config, which it never read, is
    left out and said so."""
    old = runner.invoke(app, ["identify", "--config", "c.yaml", "--compare", str(tmp_path)])
    new = runner.invoke(app, ["identify", "compare", str(tmp_path)])
    assert old.exit_code == new.exit_code == 2
    assert "no directions.csv" in new.stderr and new.stderr in old.stderr
    assert _note(old).endswith(
        f"is now `steer-eval identify compare {tmp_path}` (--config did nothing there: left out)"
    )


@pytest.mark.parametrize(
    ("args", "owner"),
    [
        (["pool", "--shard", "0"], "`identify run`"),
        (["--pool", "--shard", "0"], "`identify run`"),  # the old form: refused as before
        (["pool", "--quick"], "`identify run`"),
        (["compare", "x", "--toys", "3"], "`identify simulate`"),
        (["simulate", "--heldout"], "`identify run`"),
        (["run", "--exploratory"], "`identify pool`"),
    ],
)
def test_a_bad_combination_names_the_command_that_takes_the_option(args, owner) -> None:
    out = runner.invoke(app, ["identify", *args])
    assert out.exit_code == 2
    said = " ".join(out.stderr.split()).replace("│", "").replace("  ", " ")
    option = next(a for a in args[1:] if a.startswith("--") and a != "--pool")
    command = args[0].lstrip("-")
    assert f"`identify {command}` takes no {option}: it is an option of {owner}" in said


def test_a_misspelt_option_is_still_typers_error() -> None:
    out = runner.invoke(app, ["identify", "pool", "--no-such"])
    assert out.exit_code == 2 and "No such option: --no-such" in out.stderr
