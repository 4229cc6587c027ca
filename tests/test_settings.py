"""The settings, defined once: the training guide's table, the generated flags, --set, help at 80 columns."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import typer.main
from typer.testing import CliRunner

from inr_cli import settings
from inr_cli.api import KEYWORDS
from inr_cli.cli import app
from inr_cli.commands.setting_options import COMMAND_LINE
from inr_cli.config import budget_bytes, given_settings, options_table, read_toml
from inr_cli.errors import UsageError

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "training.md"


def guide_options_table() -> str:
    """The first table after the "### Training options" heading of docs/training.md."""
    section = GUIDE.read_text(encoding="utf-8").split("### Training options\n", 1)[1].splitlines()
    lines = itertools.dropwhile(lambda line: not line.startswith("|"), section)
    return "".join(line + "\n" for line in itertools.takewhile(lambda line: line.startswith("|"), lines))


def test_the_options_table_is_rendered_from_the_settings(monkeypatch):
    """Regenerate with: python -c 'from inr_cli.config import options_table; print(options_table())'."""
    assert guide_options_table() == options_table()
    changed = [dataclasses.replace(s, help=s.help + " (changed)") if s.key == "optimizer.lr" else s
               for s in settings.SETTINGS]
    monkeypatch.setattr(settings, "SETTINGS", tuple(changed))
    assert guide_options_table() != options_table()  # the check above can fail


def test_every_flag_setting_is_an_option_of_the_commands_that_take_it():
    commands = typer.main.get_command(app).commands
    for command in settings.FITS:
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


NETWORK_KEYS = ", ".join(s.field for s in settings.SETTINGS if s.section == "network")


@pytest.mark.parametrize("command, flags, keys, on_the_command_line, in_python", [
    ("train", {"size": 0}, [],
     "--size must be positive, got 0; for data.size = 0 leave --size out or pass --set data.size=0",
     "size= must be positive, got 0; for data.size = 0 leave size= out or pass settings={'data.size': 0}"),
    ("train", {"size": -5}, [],  # no advice the key would refuse too
     "--size must be positive, got -5", "size= must be positive, got -5"),
    ("train", {"hidden": 8}, [("network.hidden", 9)],
     "network.hidden is given twice, differently (--hidden and --set network.hidden=9)",
     "network.hidden is given twice, differently (hidden= and settings={'network.hidden': 9})"),
    ("train", {}, [("data.gray", True), ("data.gray", False)],
     "data.gray is given twice, differently (--set data.gray=true and --set data.gray=false)",
     "data.gray is given twice, differently (settings={'data.gray': True} and settings={'data.gray': False})"),
    ("fit-many", {}, [("training.checkpoint_every", 5)],
     "--set training.checkpoint_every: training.checkpoint_every is not a setting of fit-many",
     "settings['training.checkpoint_every']: training.checkpoint_every is not a setting of fit-many"),
    ("train", {}, [("network.widht", 3)],
     f"--set network.widht: unknown key 'network.widht' (known in [network]: {NETWORK_KEYS})",
     f"settings['network.widht']: unknown key 'network.widht' (known in [network]: {NETWORK_KEYS})"),
    ("train", {"stpes": 5}, [],
     "--stpes is not a setting of train; did you mean --steps?",
     "stpes= is not a setting of train; did you mean steps=?"),
    ("train", {"hidden": "8"}, [],
     "--hidden must be an integer, got '8'",
     "hidden= must be an integer, got '8'"),
    ("train", {}, [("optimizer.lr", "fast")],
     "--set optimizer.lr must be a number, got 'fast'",
     "settings['optimizer.lr'] must be a number, got 'fast'"),
    ("train", {"max_bytes": "500kk"}, [],  # a byte budget is read where it is given, by its flag
     "--max-bytes '500kk' is not a byte budget: write it as 500k, 1.5M, 2MiB, 300000 or image",
     "max_bytes= '500kk' is not a byte budget: write it as 500k, 1.5M, 2MiB, 300000 or image"),
    ("train", {}, [("network.max_bytes", "lots")],
     "--set network.max_bytes 'lots' is not a byte budget: write it as 500k, 1.5M, 2MiB, 300000 or image",
     "settings['network.max_bytes'] 'lots' is not a byte budget: write it as 500k, 1.5M, 2MiB, 300000 or image"),
    ("train", {"max_bytes": 0}, [],
     "--max-bytes 0 is not a byte budget: write it as 500k, 1.5M, 2MiB, 300000 or image",
     "max_bytes= 0 is not a byte budget: write it as 500k, 1.5M, 2MiB, 300000 or image"),
])
def test_given_settings_are_checked_once_in_each_callers_spelling(command, flags, keys, on_the_command_line,
                                                                  in_python):
    """The command line and the library go through one check with one wording; only the spelling
    of a flag and a key differs."""
    for spelling, message in [(COMMAND_LINE, on_the_command_line), (KEYWORDS, in_python)]:
        with pytest.raises(UsageError) as raised:
            given_settings(command, flags, keys, spelling)
        assert str(raised.value) == message


def test_given_settings_by_name_and_by_key():
    given = given_settings("train", {"hidden": 8, "lr": None, "fourier_sigma": 3},
                           [("optimizer.beta2", 0.99), ("network.hidden", 8), ("data.size", 0)], KEYWORDS)
    assert given == {"hidden": 8, "fourier_sigma": 3.0, "beta2": 0.99, "size": 0}
    assert isinstance(given["fourier_sigma"], float)


def test_numpy_scalars_are_the_numbers_they_hold():
    """A NumPy integer or float is taken where a Python one is, and held as the Python one (the
    checkpoint's JSON, the config.toml); a NumPy bool is no number, a float no integer."""
    given = given_settings("train", {"hidden": np.int64(8), "steps": np.uint16(5), "lr": np.float32(0.5),
                                     "omega0": np.int32(30), "gray": np.bool_(True)},
                           [("optimizer.beta2", np.float64(0.99))], KEYWORDS)
    assert given == {"hidden": 8, "steps": 5, "lr": 0.5, "omega0": 30.0, "gray": True, "beta2": 0.99}
    assert [type(given[name]) for name in ("hidden", "steps", "lr", "omega0", "gray", "beta2")] == \
        [int, int, float, float, bool, float]
    for flags in ({"hidden": np.bool_(True)}, {"lr": np.bool_(False)}, {"steps": np.float32(5)},
                  {"gray": np.int64(1)}):
        with pytest.raises(TypeError, match="must be"):
            given_settings("train", flags, [], KEYWORDS)


def test_a_byte_budget_is_a_text_or_a_whole_number_of_bytes(tmp_path):
    """network.max_bytes, a text (500k, 2MiB, image), is also a number of bytes where the caller has
    numbers: a TOML integer, a Python or NumPy int, held as its text. A bool, a float, zero or less is
    refused in one line naming where it was given."""
    assert given_settings("train", {"max_bytes": 300000}, [], KEYWORDS) == {"max_bytes": "300000"}
    assert given_settings("train", {}, [("network.max_bytes", np.int64(4096))], KEYWORDS) == {"max_bytes": "4096"}
    assert given_settings("train", {"max_bytes": "2MiB"}, [], KEYWORDS) == {"max_bytes": "2MiB"}
    (tmp_path / "budget.toml").write_text("[network]\nmax_bytes = 500000\n")
    assert read_toml(tmp_path / "budget.toml") == {"network.max_bytes": "500000"}
    assert budget_bytes(read_toml(tmp_path / "budget.toml")["network.max_bytes"]) == 500000
    for value, kind in (("0", ValueError), ("-4", ValueError), ("true", TypeError), ("1.5e5", TypeError),
                        ('"many"', ValueError)):
        (tmp_path / "bad.toml").write_text(f"[network]\nmax_bytes = {value}\n")
        with pytest.raises(kind) as raised:
            read_toml(tmp_path / "bad.toml")
        assert isinstance(raised.value, UsageError)
        assert str(raised.value).startswith(f"{tmp_path / 'bad.toml'}: network.max_bytes "), str(raised.value)
        assert str(raised.value).endswith(" is not a byte budget: write it as 500k, 1.5M, 2MiB, 300000 or image")


def test_one_map_from_a_flag_to_its_setting():
    from inr_cli import config

    assert not hasattr(config, "FLAGS")
    assert settings.BY_NAME["fourier_sigma"].key == "encoding.sigma"
    assert config.flags_to_values({"fourier_sigma": 3.0, "hidden": None}) == {"encoding.sigma": 3.0}


# Where each condition of Setting.applies holds and where it does not, as a configuration's values.
WHERE = {settings.FOURIER: ({"encoding.name": "fourier"}, {}),
         settings.HASH_GRID: ({"encoding.name": "hashgrid"}, {}),
         settings.SINE: ({}, {"network.model": "relu"}),
         settings.SIGMOID_OUTPUT: ({"network.model": "relu"}, {}),
         settings.FILE_START: ({"training.init": "start.safetensors"}, {}),
         settings.DRAWN_START: ({}, {"training.init": "start.safetensors"}),
         settings.ADAM: ({}, {"optimizer.name": "sgd"}),
         settings.SGD: ({"optimizer.name": "sgd"}, {})}


def test_a_setting_given_where_it_does_nothing_is_refused_by_its_flag_and_key():
    """Every setting that acts only in some networks (Setting.applies; a new one is covered here)
    is refused where given and useless, and taken where it acts; a config file holding every key
    (a run's config.toml) is not held to it."""
    from inr_cli.config import DEFAULTS, from_values, refuse_inapplicable

    conditional = [s for s in settings.SETTINGS if s.applies]
    assert {s.applies for s in conditional} == set(WHERE) == set(settings.APPLIES)
    for setting in conditional:
        acts, idle = WHERE[setting.applies]
        refuse_inapplicable(from_values({**DEFAULTS, **acts}), [setting.key])
        with pytest.raises(UsageError) as refused:
            refuse_inapplicable(from_values({**DEFAULTS, **idle}), [setting.key])
        assert str(refused.value).startswith(f"{setting.spelled} does nothing here"), refused.value
    refuse_inapplicable(from_values(DEFAULTS), ["network.start_output_at_mean"], settings.META_INIT)


def test_the_command_line_and_the_api_refuse_a_setting_that_does_nothing(tmp_path, rgb_png):
    import inr_cli

    result = CliRunner().invoke(app, ["train", str(rgb_png), "--encoding", "hashgrid", "--fourier-sigma", "3",
                                      "--run-dir", str(tmp_path / "run")])
    assert result.exit_code == 2 and "--fourier-sigma (encoding.sigma) does nothing here" in result.stderr
    assert not (tmp_path / "run").exists()
    with pytest.raises(UsageError, match="--start-output-at-mean .* does nothing here"):
        inr_cli.fit(rgb_png, start_output_at_mean=True, run_dir=tmp_path / "run", quiet=True)
    config = tmp_path / "grid.toml"
    config.write_text("[encoding]\nname = \"hashgrid\"\nsigma = 3.0\n")  # as a run's config.toml holds every key
    from inr_cli.config import build_config

    assert build_config(config, {}).encoding.sigma == 3.0


def test_a_whole_number_beyond_what_a_checkpoint_stores_is_refused_before_any_work(tmp_path, rgb_png):
    """Every whole-number setting is at most what a checkpoint and a set's plan store it as (a signed
    64-bit number; a seed, an unsigned one): beyond it, one line naming the setting, from the command
    line and from Python, before anything is written; never NumPy's OverflowError when the first
    checkpoint is written, after the training began."""
    import inr_cli
    from inr_cli.config import build_config

    most = int(np.iinfo(np.int64).max)  # limits.MAX_COUNT
    for setting in settings.SETTINGS:
        if setting.type is int and setting.most is None:
            with pytest.raises(UsageError, match=f"{re.escape(setting.key)}\\) must be at most {most}, got "
                                                 f"{most + 1}$|^{re.escape(setting.key)} must be at most"):
                build_config(None, {setting.key: most + 1})
    result = CliRunner().invoke(app, ["train", str(rgb_png), "--steps", str(10**30), "--hidden", "8", "--run-dir",
                                      str(tmp_path / "run")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.stderr.strip() == f"error: --steps (training.steps) must be at most {most}, got {10**30}"
    with pytest.raises(ValueError, match=f"must be at most {most}, got {most + 1}"):
        inr_cli.fit(rgb_png, steps=most + 1, hidden=8, run_dir=tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def _flags_in(text: str) -> set[str]:
    return set(re.findall(r"`(--[a-z0-9-]+)`", text))


def test_the_guides_lists_of_what_a_rerun_may_change_and_refuses_are_the_codes():
    """docs/training.md's resume list is RESUMABLE; docs/sets.md's lists for meta-init are the
    settings it does not take and the ones its checkpoint records (meta.RUN_KEYS, MetaOptions)."""
    from inr_cli.sets.meta import LONGER, RUN_KEYS, MetaOptions

    docs = GUIDE.parent
    resume = (docs / "training.md").read_text().split("## Resuming and rerunning", 1)[1].split("\n## ", 1)[0]
    may_change, budget = resume.split("\n- ")[1:3]
    free = {s.option for s in settings.SETTINGS if not s.fits and settings.TRAIN in s.commands}
    assert _flags_in(may_change) == free
    assert _flags_in(budget) == {settings.BY_NAME[name].option for name in settings.RESUMABLE} - free
    sets_guide = (docs / "sets.md").read_text()
    not_taken = sets_guide.split("The inner fits last", 1)[1].split(", so ", 1)[1].split("\n\n", 1)[0]
    assert _flags_in(not_taken) == {s.option for s in settings.for_command(settings.FIT_MANY)
                                    if settings.META_INIT not in s.commands}
    recorded = sets_guide.split("The same command resumes and learns", 1)[1].split("\n\n", 1)[0]
    options = {"--" + name.replace("_", "-") for name in MetaOptions.__dataclass_fields__ if name not in LONGER}
    assert options | {settings.BY_KEY[key].option for key in RUN_KEYS} <= _flags_in(recorded)
