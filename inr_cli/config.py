"""Training configuration, nested like its TOML file: [network], [encoding], [optimizer], [training], [data].

The settings are defined in settings.py (type, bounds, default, flag, help); this module builds
the configuration classes from them and reads, checks and writes configurations. Precedence: the
settings' defaults < the preset (named, or the chosen model's) < a --config file < the command
line. An unknown key, a wrong type or a bad value is a UsageError (exit code 2).
"""

from __future__ import annotations

import difflib
import json
import math
import numbers
import os
import stat
import sys
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields, make_dataclass, replace
from pathlib import Path

from inr_cli.errors import ArgumentTypeError, ArgumentValueError, UsageError
from inr_cli.limits import MAX_COUNT, MAX_TEXT_BYTES
from inr_cli.resources import configs_dir
from inr_cli.settings import (  # noqa: F401
    ADAM,
    ADDED_KEYS,
    APPLIES,
    BY_KEY,
    BY_NAME,
    DEFAULTS,
    DEVICES,
    DRAWN_START,
    ENCODINGS,
    FILE_START,
    FIT_MANY_FREE_KEYS,
    FOURIER,
    HASH_GRID,
    HASH_GRID_KEYS,
    MATMULS,
    META_INIT,
    MODELS,
    NON_NEGATIVE,
    OPTIMIZERS,
    POSITIVE,
    SETTINGS,
    SGD,
    SIGMOID_OUTPUT,
    SINE,
    TRAIN,
    Device,
    Encoding,
    Matmul,
    Model,
    Optimizer,
    for_command,
    format_value,
    markdown_table,
)


def _section_class(section: str, class_name: str) -> type:
    cls = make_dataclass(class_name, [(s.field, s.type) for s in SETTINGS if s.section == section], frozen=True)
    cls.__module__ = __name__  # so that pickle (Ray's workers) finds it here
    return cls


NetworkConfig = _section_class("network", "NetworkConfig")
EncodingConfig = _section_class("encoding", "EncodingConfig")
OptimizerConfig = _section_class("optimizer", "OptimizerConfig")
TrainingConfig = _section_class("training", "TrainingConfig")
DataConfig = _section_class("data", "DataConfig")


@dataclass(frozen=True)
class Config:
    network: NetworkConfig
    encoding: EncodingConfig
    optimizer: OptimizerConfig
    training: TrainingConfig
    data: DataConfig

    def get(self, key: str):
        section, name = key.split(".")
        return getattr(getattr(self, section), name)


SECTION_TYPES = {"network": NetworkConfig, "encoding": EncodingConfig, "optimizer": OptimizerConfig,
                 "training": TrainingConfig, "data": DataConfig}
KEY_TYPES = {s.key: s.type for s in SETTINGS}

# The preset a model starts from when no --preset is named.
MODEL_PRESETS = {"siren": "siren", "sigmoid": "sigmoid", "relu": "fourier"}
# fit-many and meta-init: a set is fitted to be learned from, its images small (configs/sets.toml)
SET_PRESETS = {**MODEL_PRESETS, "siren": "sets"}
# The preset tuned for an encoding's network, where it is not its model's (inr train picks it for a large image).
ENCODING_PRESETS = {"hashgrid": "hashgrid"}


def tuned_preset(config: Config) -> str:
    """The preset tuned for this configuration's network: its encoding's, else its model's."""
    return ENCODING_PRESETS.get(config.encoding.name, MODEL_PRESETS[config.network.model])


def presets() -> list[str]:
    return sorted(p.stem for p in configs_dir().glob("*.toml"))


def preset_path(name: str) -> Path:
    path = configs_dir() / f"{name}.toml"
    if not path.is_file():
        raise UsageError(f"no preset '{name}' (available: {', '.join(presets())})")
    return path


def read_toml(path: Path) -> dict:
    """{"section.key": value} from a config file, checked for unknown sections, keys and types."""
    path = Path(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a folder, or a FIFO that would block the read
            raise UsageError(f"{path}: not a config file (.toml) but a folder, FIFO or device")
        with open(path, "rb") as handle:
            # its size, not a read of the limit's bytes: that would take a buffer of the limit each time
            if os.fstat(handle.fileno()).st_size > MAX_TEXT_BYTES:
                raise UsageError(f"{path}: larger than {MAX_TEXT_BYTES:,} bytes, more than a configuration could be")
            text = handle.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: config file not found") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        document = tomllib.loads(text.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a UTF-8 text file") from None
    return _flatten(str(path), document)


def _flatten(where: str, document: dict) -> dict:
    values = {}
    for section, table in document.items():
        if section not in SECTION_TYPES:
            raise UsageError(f"{where}: unknown section [{section}] (known: {', '.join(SECTION_TYPES)})")
        if not isinstance(table, dict):
            raise UsageError(f"{where}: '{section}' must be a [section]")
        for key, value in table.items():
            dotted = f"{section}.{key}"
            if dotted not in KEY_TYPES:
                raise UsageError(f"{where}: {_unknown_key(dotted)}")
            values[dotted] = coerce_setting(f"{where}: {dotted}", dotted, value)
    return values


def _is_bool(value) -> bool:
    """A Python or NumPy bool (NumPy's is no numbers.Integral; one exists only where NumPy is loaded)."""
    numpy = sys.modules.get("numpy")
    return isinstance(value, bool) or (numpy is not None and isinstance(value, numpy.bool_))


def coerce_value(where: str, expected: type, value):
    """value as a setting of type `expected` holds it: a bool, an int (a Python or NumPy integer, never
    a bool or a float), a float (any real number but a bool) or a str; another is refused by name."""
    if expected is bool:
        if not _is_bool(value):
            raise ArgumentTypeError(f"{where} must be true or false, got {value!r}")
        return bool(value)
    if expected is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ArgumentTypeError(f"{where} must be an integer, got {value!r}")
        return int(value)
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ArgumentTypeError(f"{where} must be a number, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{where} must be a string, got {value!r}")
    return str(value)


def coerce_setting(where: str, key: str, value):
    """A value given for the setting `key` (by a flag, --set, a config file or the API), as the
    configuration holds it (coerce_value); a byte budget (network.max_bytes) is also checked here,
    where `where` names how it was given: a text or a whole number of bytes, held as text."""
    if key == BUDGET_KEY:
        return budget_text(where, value)
    return coerce_value(where, KEY_TYPES[key], value)


def from_values(values: dict, where: str = "configuration") -> Config:
    """A Config from a complete {"section.key": value}; a missing key is named."""
    missing = [key for key in KEY_TYPES if key not in values]
    if missing:
        raise UsageError(f"{where}: key '{missing[0]}' is not set")
    sections = {name: cls(**{f.name: values[f"{name}.{f.name}"] for f in fields(cls)})
                for name, cls in SECTION_TYPES.items()}
    return Config(**sections)


def with_values(config: Config, values: dict) -> Config:
    """config with {"section.key": value} replaced, validated."""
    sections = {name: getattr(config, name) for name in SECTION_TYPES}
    for key, value in values.items():
        section, name = key.split(".")
        sections[section] = replace(sections[section], **{name: value})
    return validate(Config(**sections))


def flags_to_values(flags: dict) -> dict:
    """{"flag_name": value} (None = not given) -> {"section.key": value}."""
    return {BY_NAME[name].key: value for name, value in flags.items() if value is not None}


@dataclass(frozen=True)
class Spelling:
    """How a caller writes a setting, for given_settings' messages: the command line's --lr-min and
    --set optimizer.lr_min=0.001, or the library's lr_min= and settings={'optimizer.lr_min': 0.001}."""

    flag: Callable[[str], str]  # a flag's name -> "--lr-min"
    key: Callable[[str], str]  # "section.key" -> "--set optimizer.lr_min"
    key_value: Callable[[str, object], str]  # ("section.key", value) -> "--set optimizer.lr_min=0.001"


def given_settings(command: str, flags: dict, keys: Iterable[tuple[str, object]], spelling: Spelling) -> dict:
    """{flag name: value} of the settings a caller gave `command`: by flag name ({name: value}, None =
    not given) and by key (("section.key", value) pairs, in the order given), each checked: a name
    or key the command does not take, a value of the wrong type, a flag's own bound; a setting
    given twice with different values is refused."""
    takes = for_command(command)
    by_name = {s.name: s for s in takes if s.flag}
    given, said = {}, {}
    for name, value in flags.items():
        if name not in by_name:
            close = difflib.get_close_matches(name, list(by_name), n=1)
            hint = (f"; did you mean {spelling.flag(close[0])}?" if close
                    else f" (settings: {', '.join(map(spelling.flag, by_name))})")
            raise ArgumentTypeError(f"{spelling.flag(name)} is not a setting of {command}{hint}")
        if value is None:
            continue
        setting = by_name[name]
        value = coerce_setting(spelling.flag(name), setting.key, value)
        if setting.flag_bound == POSITIVE and value <= 0:
            key_takes_it = setting.bound is None or (setting.bound == NON_NEGATIVE and value == 0)
            raise ArgumentValueError(f"{spelling.flag(name)} must be positive, got {value}" + (
                f"; for {setting.key} = {value} leave {spelling.flag(name)} out or pass "
                f"{spelling.key_value(setting.key, value)}" if key_takes_it else ""))
        given[name], said[name] = value, spelling.flag(name)
    allowed = {s.key for s in takes}
    for key, value in keys:
        if key not in KEY_TYPES:
            raise UsageError(f"{spelling.key(key)}: {_unknown_key(key)}")
        if key not in allowed:
            raise UsageError(f"{spelling.key(key)}: {key} is not a setting of {command}")
        name = BY_KEY[key].name
        value = coerce_setting(spelling.key(key), key, value)
        if name in given and given[name] != value:
            raise ArgumentValueError(f"{key} is given twice, differently ({said[name]} and "
                             f"{spelling.key_value(key, value)})")
        given[name], said[name] = value, spelling.key_value(key, value)
    return given


def _unknown_key(key: str) -> str:
    section = key.partition(".")[0]
    if section in SECTION_TYPES:
        known = ", ".join(f.name for f in fields(SECTION_TYPES[section]))
        return f"unknown key '{key}' (known in [{section}]: {known})"
    return f"unknown key '{key}' (sections: {', '.join(SECTION_TYPES)})"


def parse_assignment(text: str) -> tuple[str, object]:
    """`section.key=value` (--set) -> ("section.key", value parsed by the key's type)."""
    key, equals, raw = text.partition("=")
    key = key.strip()
    if not equals:
        raise UsageError(f"--set {text}: expected section.key=value, e.g. --set optimizer.lr=1e-3")
    if key not in KEY_TYPES:
        raise UsageError(f"--set {text}: {_unknown_key(key)}")
    return key, _parse(f"--set {key}", KEY_TYPES[key], raw.strip())


def _parse(where: str, expected: type, raw: str):
    if expected is bool:
        words = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False,
                 "off": False}
        if raw.lower() not in words:
            raise UsageError(f"{where} must be true or false, got {raw!r}")
        return words[raw.lower()]
    if expected is str:
        return raw
    try:
        return expected(raw)
    except ValueError:
        raise UsageError(f"{where} must be {'an integer' if expected is int else 'a number'}, got {raw!r}") from None


BYTE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}
BUDGET_KEY = "network.max_bytes"


def budget_text(where: str, value) -> str:
    """A byte budget as given (`where` names how: --max-bytes, max_bytes=, a file's key): a text
    budget_bytes reads, or a whole number of bytes (a TOML integer, a Python or NumPy int), which is
    held as its text; a bool, a float or a count below one byte is refused with budget_bytes' line."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value < 1:
            raise ArgumentValueError(_not_a_budget(where, value))
        return str(int(value))
    if not isinstance(value, str):
        raise ArgumentTypeError(_not_a_budget(where, value))
    budget_bytes(value, where)
    return str(value)


def _not_a_budget(where: str, value) -> str:
    return f"{where} {value!r} is not a byte budget: write it as 500k, 1.5M, 2MiB, 300000 or image"


def budget_bytes(text: str, where: str = "max_bytes") -> int | str | None:
    """network.max_bytes read: a number of bytes (500k, 1.5M, 2MiB, 300000; a trailing B is allowed),
    "image" (the training image's 8-bit bytes, decided with the image), or None for an empty text.
    `where` names the setting in the refusal."""
    words = text.strip().lower()
    if not words:
        return None
    if words == "image":
        return "image"
    number = words.removesuffix("b").rstrip()
    unit = next((u for u in sorted(BYTE_UNITS, key=len, reverse=True) if u and number.endswith(u)), "")
    try:
        value = float(number[: len(number) - len(unit)])
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1):
        raise ArgumentValueError(_not_a_budget(where, str(text)))
    return int(value * BYTE_UNITS[unit])


def validate(config: Config) -> Config:
    for s in SETTINGS:
        value = config.get(s.key)
        if s.choices and value not in s.choices:
            raise UsageError(f"{s.spelled} '{value}' is not one of: {', '.join(s.choices)}")
        if s.type is float and not math.isfinite(value):  # NaN passes every comparison below
            raise UsageError(f"{s.spelled} must be a finite number, got {value}")
        if s.bound == POSITIVE and not value > 0:
            raise UsageError(f"{s.spelled} must be positive, got {value}")
        if s.bound == NON_NEGATIVE and value < 0:
            raise UsageError(f"{s.spelled} must not be negative, got {value}")
        most = s.most if s.most is not None else MAX_COUNT if s.type is int else None
        if most is not None and value > most:
            raise UsageError(f"{s.spelled} must be at most {most}, got {value}")
    opt = config.optimizer
    said = {key: BY_KEY[key].spelled for key in ("optimizer.lr", "optimizer.lr_min", "encoding.min_resolution",
                                                 "encoding.max_resolution", "optimizer.warmup", "training.steps")}
    if opt.lr_min > opt.lr:
        raise UsageError(f"{said['optimizer.lr_min']} must not exceed {said['optimizer.lr']}, {opt.lr}; "
                         f"got {opt.lr_min}")
    if not (opt.beta1 < 1 and opt.beta2 < 1):
        raise UsageError("optimizer.beta1 and optimizer.beta2 must be below 1")
    budget_bytes(config.network.max_bytes)
    grid = config.encoding
    if 0 < grid.max_resolution < grid.min_resolution:
        raise UsageError(f"{said['encoding.max_resolution']} must not be below {said['encoding.min_resolution']}, "
                         f"{grid.min_resolution}; got {grid.max_resolution}")
    if config.training.matmul == "cublas" and config.training.precision != "fp32":
        raise UsageError(f"--matmul cublas multiplies in FP32 only; --precision {config.training.precision} needs "
                         f"--matmul kernel")
    if config.training.device == "cpu" and config.training.precision != "fp32":  # auto: backends/__init__.py
        raise UsageError(f"--precision {config.training.precision} (training.precision) runs on a GPU's tensor "
                         f"cores; --device cpu trains in FP32: leave it out, or train on a GPU")
    if opt.warmup >= config.training.steps:
        raise UsageError(f"{said['optimizer.warmup']} must be below {said['training.steps']}, "
                         f"{config.training.steps}; got {opt.warmup}")
    return config


def applies(setting, config: Config, command: str = TRAIN) -> bool:
    """Whether a setting does anything in this configuration (Setting.applies)."""
    drawn = config.training.init in ("random", "shared")
    return {"": True, FOURIER: config.encoding.name == "fourier", HASH_GRID: config.encoding.name == "hashgrid",
            SINE: config.network.model == "siren", SIGMOID_OUTPUT: config.network.model != "siren",
            FILE_START: not drawn or command == META_INIT,
            DRAWN_START: drawn, ADAM: config.optimizer.name == "adam",
            SGD: config.optimizer.name == "sgd"}[setting.applies]


def refuse_inapplicable(config: Config, given, command: str = TRAIN) -> None:
    """A setting given on the command line (or to the API) where it does nothing is refused by name:
    it would be recorded and ignored (a config file, which may hold every key, is not held to it)."""
    for key in given:
        setting = BY_KEY[key]
        if not applies(setting, config, command):
            raise UsageError(f"{setting.spelled} does nothing here: it acts only {APPLIES[setting.applies]}; leave "
                             f"it out")


def build_config(config_file: Path | None, values: dict, preset_name: str | None = None,
                 model_presets: dict[str, str] = MODEL_PRESETS, command: str = TRAIN,
                 start: dict | None = None) -> Config:
    """The settings' defaults, then the preset (named, or the chosen model's in `model_presets`),
    then the file, then `values` ({"section.key": v}: the command line's, held to
    refuse_inapplicable). A file start (--init PATH) names its network: `start` is what it says
    (formats/start.start_network: its network's settings, and the preset tuned for it under
    "preset"), which comes before `values` where neither a preset nor a --config is named."""
    values = {k: v for k, v in values.items() if v is not None}
    from_file = read_toml(config_file) if config_file else {}
    start = dict(start or {})
    if preset_name is None and config_file is None and start:
        preset_name = start.pop("preset")
    else:
        start = {}
    if preset_name is None:
        model = values.get("network.model") or from_file.get("network.model") or DEFAULTS["network.model"]
        if model not in MODELS:
            raise UsageError(f"model '{model}' is not one of: {', '.join(MODELS)}")
        preset_name = model_presets[model]
    path = preset_path(preset_name)
    config = validate(from_values({**DEFAULTS, **read_toml(path), **start, **from_file, **values}, str(path)))
    refuse_inapplicable(config, values, command)
    return config


def given_keys(config_file: Path | None, values: dict, preset_name: str | None = None) -> set[str]:
    """The keys that build_config's arguments say themselves: `values` (the flags and --set), the
    --config file's and the named preset's. The others are the settings' defaults or the model's
    preset, which a later inr may choose otherwise: a rerun takes those from what it resumes."""
    named = read_toml(preset_path(preset_name)) if preset_name is not None else {}
    from_file = read_toml(config_file) if config_file else {}
    return {key for key, value in values.items() if value is not None} | from_file.keys() | named.keys()


def fitted_settings(config: Config) -> dict:
    """{key: value} of what a fitted network depends on besides its image and start: every setting that
    changes the fit, less the hash grid's for a network without one (NetworkSpec leaves those out too).
    A rerun, an --add, a join and a resumed study must match it."""
    unused = HASH_GRID_KEYS if config.encoding.name != "hashgrid" else set()
    return {key: config.get(key) for key in KEY_TYPES if key not in FIT_MANY_FREE_KEYS and key not in unused}


FOURIER_KEYS = {s.key for s in SETTINGS if s.name.startswith("fourier_")}
ADAM_KEYS = {"optimizer.beta1", "optimizer.beta2", "optimizer.eps"}
DRAWN_STARTS = ("random", "shared")  # training.init's values that name no file: its draws (formats/start.py)


def unused_settings(config: Config, one_network: bool = True, latents: bool = False) -> dict[str, str]:
    """{key: why} of the settings that a run of this configuration does not use: another network's,
    encoding's or optimiser's, and what only a file start or a set tells apart; `latents`: a set of
    latents over a base, which steps with the base's learned rates on every pixel. The checkpoint
    keeps them all (a resume needs every key); what a person reads (config.toml, inr view) leaves
    them out."""
    unused = {}
    if latents:
        unused.update({key: "a set of latents steps with its base's learned rates" for key in KEY_TYPES
                       if key.startswith("optimizer.")})
        unused["training.batch_size"] = "a set of latents is fitted on every pixel"
    if config.network.model != "siren":
        unused["network.omega0"] = "a SIREN's frequency"
    else:
        unused["network.linear_output"] = "a SIREN's output is linear already"
    for keys, name, whose in ((FOURIER_KEYS, "fourier", "Fourier features'"), (HASH_GRID_KEYS, "hashgrid",
                                                                                "the hash grid's")):
        if config.encoding.name != name:
            unused.update(dict.fromkeys(keys, whose))
    if config.optimizer.name != "adam":
        unused.update(dict.fromkeys(ADAM_KEYS, "Adam's"))
    if config.optimizer.name != "sgd":
        unused["optimizer.momentum"] = "SGD's"
    if config.training.init in DRAWN_STARTS:
        unused["network.start_output_at_mean"] = "for a file start (--init PATH)"
        if one_network:
            unused["training.init"] = "random and shared draw one network alike"
    return {key: unused[key] for key in KEY_TYPES if key in unused}  # in the table's order


def used_settings(config: Config, one_network: bool = True, latents: bool = False) -> dict[str, dict]:
    """{section: {field: value}} of the settings the run uses (unused_settings left out)."""
    unused = unused_settings(config, one_network, latents)
    return {section: {field: value for field, value in asdict(getattr(config, section)).items()
                      if f"{section}.{field}" not in unused} for section in SECTION_TYPES}


def to_toml(config: Config, every_key: bool = False) -> str:
    """A run's config.toml: the settings it uses, section by section, and lines naming those it does
    not (which take their defaults when the file is given to --config, and fit the same network);
    every_key: all of them (a preset printed as a file to edit)."""
    lines = ["# Effective configuration of this run (inr train --config accepts this file)."]
    unused = {} if every_key else unused_settings(config)
    for section in SECTION_TYPES:
        lines.append(f"\n[{section}]")
        lines += [f"{field} = {format_value(value)}" for field, value in asdict(getattr(config, section)).items()
                  if f"{section}.{field}" not in unused]
    by_reason: dict[str, list[str]] = {}
    for key, why in unused.items():
        by_reason.setdefault(why, []).append(key)
    if by_reason:
        lines.append("\n# Left out, as this run does not use them:")
        lines += [f"#   {', '.join(keys)}: {why}" for why, keys in by_reason.items()]
    return "\n".join(lines) + "\n"


def to_json(config: Config) -> str:
    return json.dumps(asdict(config), sort_keys=True)


def from_json(text: str) -> Config:
    document = json.loads(text)
    return from_values({**ADDED_KEYS, **_flatten("checkpoint", document)}, "checkpoint")


def from_flat_v1(values: dict) -> Config:
    """Checkpoint format 1 kept the configuration as one flat table of the flags' names."""
    return from_values({**ADDED_KEYS, **{BY_NAME[k].key: v for k, v in values.items() if k in BY_NAME}},
                       "checkpoint (format 1)")


def options_table() -> str:
    """The table of training options (docs/training.md), with each preset's tuned values beside the defaults."""
    return markdown_table({name: read_toml(preset_path(name)) for name in presets()})
