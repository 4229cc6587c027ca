"""The flags of `train` and `fit-many`, made from the settings (inr_cli/settings.py).

`with_setting_options(COMMAND)` gives a command function one Typer option per setting the command
takes, placed after its --set option in --help; Typer reads the function's __signature__, and the
options reach the function as **settings. `given_settings` turns them and the --set assignments
into {flag name: value} for what the user gave, checked by config.given_settings as the library's
keyword arguments are.
"""

from __future__ import annotations

import functools
import inspect
from typing import Literal, Optional

import typer

from inr_cli import config
from inr_cli.config import SET_PRESETS, preset_path, presets, read_toml
from inr_cli.settings import FIT_MANY, META_INIT, Setting, for_command, format_value

COMMAND_LINE = config.Spelling(
    flag=lambda name: "--" + name.replace("_", "-"),
    key=lambda key: f"--set {key}",
    key_value=lambda key, value: f"--set {key}={value if isinstance(value, str) else format_value(value)}",
)
SET_HELP = "Set any configuration key, e.g. --set optimizer.beta2=0.99 (repeatable; every key: inr presets siren)."


def set_option():
    """The --set option, declared by each command that takes settings."""
    return typer.Option([], "--set", metavar="KEY=VALUE", help=SET_HELP, show_default=False)


def ray_option(what: str):
    """--ray ADDRESS, for the commands whose work runs on a Ray cluster (`what` it runs there)."""
    return typer.Option(None, "--ray", metavar="ADDRESS", help=f"local | auto | ray://host:port: {what} on a Ray "
                        "cluster (needs Ray: the 'cluster' extra of inr).")


def workers_option():
    """--workers N: how many Ray workers (fit-many's shard workers, meta-init's inner fits)."""
    return typer.Option(None, "--workers", metavar="N", help="Ray workers (default: one per GPU share, or one per "
                        "machine's worth of CPUs).")


def gpus_per_worker_option():
    return typer.Option(None, "--gpus-per-worker", metavar="F", help="Share of a GPU each Ray worker takes (0.5: two "
                        "workers per GPU; default 1).")


# Where a command uses a setting otherwise than the table's help says (meta-init holds its rate).
COMMAND_HELP = {(META_INIT, "optimizer.lr"): "Learning rate of the inner fits, held at this value (no cosine, "
                "no warm-up: they stand for the first steps of a fit); learn with the --lr you will fit with"}


def _option(setting: Setting, command: str) -> inspect.Parameter:
    if setting.type is bool:  # a pair of flags, so that one can undo a config file's true or false
        declaration, metavar = f"{setting.option}/--no-{setting.option[2:]}", None
    else:
        declaration, metavar = setting.option, setting.metavar
    kind = Literal[setting.choices] if setting.choices else setting.type
    return inspect.Parameter(setting.name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[kind],
                             default=typer.Option(None, declaration, metavar=metavar, show_default=False,
                                                  help=f"{COMMAND_HELP.get((command, setting.key), setting.help)}. "
                                                       f"{_default_text(setting, command)}."))


# The preset a command starts from where none is named: the settings' defaults are the siren preset's
# (inr train), a set's commands start from the sets preset (config.SET_PRESETS)
COMMAND_PRESET = {FIT_MANY: SET_PRESETS["siren"], META_INIT: SET_PRESETS["siren"]}


def _default_text(setting: Setting, command: str) -> str:
    """`Default: 0.0004 (fourier, sigmoid presets: 0.003)`, in the help text: the option's own default
    is None (not given). The command's own preset's value first (fit-many's: the sets preset's), then
    the presets that differ from it. The options table (docs/training.md) says the same for inr train
    (settings.default_text)."""
    every = _presets()
    default = every[COMMAND_PRESET[command]].get(setting.key, setting.default) if command in COMMAND_PRESET \
        else setting.default
    tuned: dict[str, list[str]] = {}
    for preset, values in every.items():
        if values.get(setting.key, setting.default) != default:
            tuned.setdefault(_plain(values.get(setting.key, setting.default)), []).append(preset)
    text = f"Default: {_plain(default)}"
    if tuned and setting.key != "network.model":  # the model picks the preset, not the other way
        text += " (" + "; ".join(f"{', '.join(names)} preset{'s' * (len(names) > 1)}: {value}"
                                 for value, names in tuned.items()) + ")"
    return text


def _plain(value) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)


@functools.cache
def _presets() -> dict[str, dict]:
    return {name: read_toml(preset_path(name)) for name in presets()}


def with_setting_options(command: str):
    def decorate(function):
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(function, eval_str=True).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        at = next(i for i, p in enumerate(own) if p.name == "overrides") + 1
        generated = [_option(s, command) for s in for_command(command) if s.flag]
        function.__signature__ = inspect.Signature(own[:at] + generated + own[at:])
        return function

    return decorate


def given_settings(command: str, options: dict, overrides: list[str]) -> dict:
    """{flag name: value} of the settings given as flags or by --set; a key given both ways is refused."""
    return config.given_settings(command, options, [config.parse_assignment(text) for text in overrides],
                                 COMMAND_LINE)
