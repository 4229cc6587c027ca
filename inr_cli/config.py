"""Training configuration, nested like its TOML file: [network], [encoding], [optimizer], [training], [data].

Presets (configs/NAME.toml) are the only defaults: each one sets every key, and the dataclasses below
have none, so no code path can build a configuration the command line would not. Precedence: the
preset (named, or the chosen model's) < a --config file < flags. An unknown key, a wrong type or a
bad value is a UsageError (exit code 2).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Literal, get_args

from inr_cli.errors import UsageError
from inr_cli.resources import configs_dir

# The choices, as types: the command line lists them in --help and completes them.
Model = Literal["siren", "sigmoid", "relu"]
Encoding = Literal["none", "fourier"]
Optimizer = Literal["adam", "sgd"]
Device = Literal["auto", "cpu", "gpu"]
Matmul = Literal["kernel", "cublas"]
MODELS, ENCODINGS, OPTIMIZERS = get_args(Model), get_args(Encoding), get_args(Optimizer)
DEVICES, MATMULS = get_args(Device), get_args(Matmul)


@dataclass(frozen=True)
class NetworkConfig:
    model: str  # siren (sine hidden, linear output) | sigmoid (sigmoid everywhere) | relu (sigmoid output)
    hidden: int  # neurons per hidden layer
    layers: int  # hidden layers
    omega0: float  # SIREN frequency; 0 = chosen from the image's size (sizing.py)
    init_output_at_mean: bool  # output biases start at the image's mean colour (logit for a sigmoid output)


@dataclass(frozen=True)
class EncodingConfig:
    name: str  # none | fourier (Gaussian Fourier features, Tancik et al. 2020)
    features: int  # mapping size m: the network sees 2m inputs
    sigma: float  # standard deviation of the random frequencies B; 0 = chosen from the image's size


@dataclass(frozen=True)
class OptimizerConfig:
    name: str  # adam | sgd
    lr: float  # cosine-annealed from lr to lr_min over the whole step budget
    lr_min: float
    beta1: float
    beta2: float
    eps: float
    momentum: float  # SGD only


@dataclass(frozen=True)
class TrainingConfig:
    steps: int
    batch_size: int  # 0: full batch (every pixel every step)
    seed: int
    checkpoint_every: int
    log_every: int
    preview_every: int
    device: str
    matmul: str
    cuda_graph: bool


@dataclass(frozen=True)
class DataConfig:
    source: str  # image or CSV path; "" means the built-in sample
    size: int  # resize images so the longer side is this; 0 keeps them as they are
    gray: bool


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
KEY_TYPES = {f"{section}.{f.name}": f.type for section, cls in SECTION_TYPES.items() for f in fields(cls)}

# Command-line flags (and the flat field names of checkpoint format 1) -> "section.key".
FLAGS = {
    "model": "network.model", "hidden": "network.hidden", "layers": "network.layers", "omega0": "network.omega0",
    "encoding": "encoding.name", "fourier_features": "encoding.features", "fourier_sigma": "encoding.sigma",
    "optimizer": "optimizer.name", "lr": "optimizer.lr", "lr_min": "optimizer.lr_min", "beta1": "optimizer.beta1",
    "beta2": "optimizer.beta2", "eps": "optimizer.eps", "momentum": "optimizer.momentum",
    **{k: f"training.{k}" for k in ("steps", "batch_size", "seed", "checkpoint_every", "log_every", "preview_every",
                                    "device", "matmul", "cuda_graph")},
    "source": "data.source", "size": "data.size", "gray": "data.gray",
}
CHOICES = {"network.model": MODELS, "encoding.name": ENCODINGS, "optimizer.name": OPTIMIZERS,
           "training.device": DEVICES, "training.matmul": MATMULS}
POSITIVE = ("network.hidden", "network.layers", "encoding.features", "optimizer.lr", "optimizer.beta1",
            "optimizer.beta2", "optimizer.eps", "training.steps", "training.checkpoint_every", "training.log_every")
NON_NEGATIVE = ("network.omega0", "encoding.sigma",  # 0: chosen from the image's size (sizing.py)
                "optimizer.lr_min", "optimizer.momentum", "training.batch_size", "training.seed",
                "training.preview_every", "data.size")

# The preset a model starts from when no --preset is named.
MODEL_PRESETS = {"siren": "siren", "sigmoid": "sigmoid", "relu": "fourier"}


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
    if not path.is_file():
        raise UsageError(f"{path}: config file not found")
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
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
                known = ", ".join(f.name for f in fields(SECTION_TYPES[section]))
                raise UsageError(f"{where}: unknown key '{dotted}' (known in [{section}]: {known})")
            values[dotted] = _coerce(f"{where}: {dotted}", KEY_TYPES[dotted], value)
    return values


def _coerce(where: str, expected: str, value):
    if expected == "bool":
        if not isinstance(value, bool):
            raise UsageError(f"{where} must be true or false, got {value!r}")
        return value
    if expected == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{where} must be an integer, got {value!r}")
        return value
    if expected == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"{where} must be a number, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise UsageError(f"{where} must be a string, got {value!r}")
    return value


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
    return {FLAGS[name]: value for name, value in flags.items() if value is not None}


def validate(config: Config) -> Config:
    for key, choices in CHOICES.items():
        if config.get(key) not in choices:
            raise UsageError(f"{_flag(key)} '{config.get(key)}' is not one of: {', '.join(choices)}")
    for key in POSITIVE:
        if not config.get(key) > 0:
            raise UsageError(f"{_flag(key)} must be positive, got {config.get(key)}")
    for key in NON_NEGATIVE:
        if config.get(key) < 0:
            raise UsageError(f"{_flag(key)} must not be negative, got {config.get(key)}")
    opt = config.optimizer
    if opt.lr_min > opt.lr:
        raise UsageError(f"lr_min ({opt.lr_min}) must not exceed lr ({opt.lr})")
    if not (opt.beta1 < 1 and opt.beta2 < 1):
        raise UsageError("beta1 and beta2 must be below 1")
    return config


def _flag(key: str) -> str:
    """The name a user knows a key by: its flag's, else the key."""
    return next((flag for flag, dotted in FLAGS.items() if dotted == key), key)


def build_config(config_file: Path | None, values: dict, preset_name: str | None = None) -> Config:
    """The preset (named, or the chosen model's), then the file, then `values` ({"section.key": v})."""
    values = {k: v for k, v in values.items() if v is not None}
    from_file = read_toml(config_file) if config_file else {}
    if preset_name is None:
        model = values.get("network.model") or from_file.get("network.model") or "siren"
        if model not in MODELS:
            raise UsageError(f"model '{model}' is not one of: {', '.join(MODELS)}")
        preset_name = MODEL_PRESETS[model]
    path = preset_path(preset_name)
    return validate(from_values({**read_toml(path), **from_file, **values}, str(path)))


def to_toml(config: Config) -> str:
    lines = ["# Effective configuration of this run (inr train --config accepts this file)."]
    for section in SECTION_TYPES:
        lines.append(f"\n[{section}]")
        for key, value in asdict(getattr(config, section)).items():
            lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def to_json(config: Config) -> str:
    return json.dumps(asdict(config), sort_keys=True)


# Keys added after checkpoints were first written, with the value that does what those runs did.
ADDED_KEYS = {"network.init_output_at_mean": False}


def from_json(text: str) -> Config:
    document = json.loads(text)
    return from_values({**ADDED_KEYS, **_flatten("checkpoint", document)}, "checkpoint")


def from_flat_v1(values: dict) -> Config:
    """Checkpoint format 1 kept the configuration as one flat table of the flags' names."""
    return from_values({**ADDED_KEYS, **{FLAGS[k]: v for k, v in values.items() if k in FLAGS}},
                       "checkpoint (format 1)")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)
