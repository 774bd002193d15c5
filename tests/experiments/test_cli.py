"""The command line: clear one-line errors for bad input, never a bare traceback."""

from __future__ import annotations

from typer.testing import CliRunner

from experiments.cli import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_help_lists_one_subcommand_per_job():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("assets", "concepts", "classifiers", "run", "human", "panel", "bench"):
        assert command in result.output


def test_unreadable_config_is_a_clear_error(tmp_path):
    result = invoke("run", "--config", str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2
    assert "cannot read config" in result.output
    assert "Traceback" not in result.output


def test_invalid_override_names_the_field():
    result = invoke("run", "--set", "generation.max_new_tokens=lots")
    assert result.exit_code == 2
    assert "generation.max_new_tokens" in result.output


def test_strengths_without_zero_are_refused():
    result = invoke("run", "--set", "steering.strengths=[-1.0, 1.0]")
    assert result.exit_code == 2
    assert "0.0" in result.output and "baseline" in result.output


def test_unknown_key_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("generation:\n  max_tokens: 10\n")
    result = invoke("run", "--config", str(bad))
    assert result.exit_code == 2
    assert "generation.max_tokens" in result.output and "unknown key" in result.output


def test_missing_assets_say_run_make_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("STEER_EVAL_CACHE", str(tmp_path / "empty-cache"))
    result = invoke("run", "--concepts", "1")
    assert result.exit_code == 2
    assert "make setup" in result.output


def test_unknown_model_offline_is_a_clear_error():
    result = invoke("classifiers", "--model", "no-such-org/no-such-model", "--concepts", "1")
    assert result.exit_code == 2
    assert "no-such-org/no-such-model" in result.output
    assert "offline" in result.output.lower()


def test_bad_layer_lists_are_refused_before_loading_a_model():
    result = invoke("classifiers", "--layers", "3;6", "--model", "no-such-org/no-such-model")
    assert result.exit_code == 2
    assert "comma-separated" in result.output
    result = invoke("classifiers", "--layer", "3", "--layers", "3,6")
    assert result.exit_code == 2
    assert "not both" in result.output


def test_an_error_quoting_input_prints_it_as_text_not_markup():
    # "[red]" is a Rich style tag: printed as markup, the bad key would vanish from the line
    result = invoke("run", "--dry-run", "--set", "generation.[red]=1")
    assert result.exit_code == 2
    assert "generation.[red]: unknown --set key" in " ".join(result.output.split())
