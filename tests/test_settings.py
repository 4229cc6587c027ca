"""The settings, defined once: the README's table, the generated flags, --set, help at 80 columns."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import typer.main
from typer.testing import CliRunner

from inr_cli import settings
from inr_cli.cli import app
from inr_cli.config import options_table

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_options_table() -> str:
    """The first table after the "### Training options" heading."""
    section = README.read_text(encoding="utf-8").split("### Training options\n", 1)[1].splitlines()
    lines = itertools.dropwhile(lambda line: not line.startswith("|"), section)
    return "".join(line + "\n" for line in itertools.takewhile(lambda line: line.startswith("|"), lines))


def test_readme_table_is_rendered_from_the_settings(monkeypatch):
    """Regenerate with: python -c 'from inr_cli.config import options_table; print(options_table())'."""
    assert readme_options_table() == options_table()
    changed = [dataclasses.replace(s, help=s.help + " (changed)") if s.key == "optimizer.lr" else s
               for s in settings.SETTINGS]
    monkeypatch.setattr(settings, "SETTINGS", tuple(changed))
    assert readme_options_table() != options_table()  # the check above can fail


def test_every_flag_setting_is_an_option_of_the_commands_that_take_it():
    commands = typer.main.get_command(app).commands
    for command in (settings.TRAIN, settings.FIT_MANY):
        declared = {opt for param in commands[command].params for opt in param.opts + param.secondary_opts}
        for s in settings.SETTINGS:
            if s.flag:
                assert (s.option in declared) == (command in s.commands), (command, s.key)
        assert "--set" in declared


def test_resume_and_rerun_freedom_come_from_one_attribute():
    not_fitting = {s for s in settings.SETTINGS if not s.fits}
    assert settings.RESUMABLE == {s.name for s in not_fitting} | {"steps", "until_psnr"}  # the budget extends
    assert settings.FIT_MANY_FREE_KEYS == {s.key for s in not_fitting} | {"data.source"}
    assert "training.device" in settings.FIT_MANY_FREE_KEYS and "training.steps" not in settings.FIT_MANY_FREE_KEYS


def test_help_reads_at_80_columns():
    """Descriptions start in the left half and are not squeezed into a narrow column; flags show no
    `<bool>`, usage lines no `{name}` metavars."""
    runner = CliRunner()
    for command in typer.main.get_command(app).commands:
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, (command, result.output)
        for line in result.output.splitlines():
            assert len(line) <= 80, (command, line)
            indent = len(line) - len(line.lstrip())
            assert indent <= 40, (command, line)
            columns = re.split(r"\s{2,}", line.strip())
            if line.startswith("  -") and len(columns) == 2:
                assert line.index(columns[1]) <= 40, (command, line)
        assert "<bool>" not in result.output, command
        assert not re.search(r"[{[<][a-z_]+[]}>]", result.output.splitlines()[0]), command  # named metavars
    train_help = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "80"}).output
    assert "Steps between loss reads and metrics rows." in train_help
    assert "--gray / --no-gray" in train_help
