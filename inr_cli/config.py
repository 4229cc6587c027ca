"""Training configuration: built-in defaults < preset of the model < --config file < flags.

A TOML file has sections [network], [optimizer], [training] and [data]; every key is documented in
FIELDS below. An unknown key, a wrong type or a bad value is a UsageError (exit code 2).
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from inr_cli.errors import UsageError
from inr_cli.network import MODELS
from inr_cli.resources import configs_dir

OPTIMIZERS = ("adam", "sgd")
DEVICES = ("auto", "cpu", "gpu")
MATMULS = ("kernel", "cublas")


@dataclass(frozen=True)
class Config:
    # [network]
    model: str = "siren"
    hidden: int = 256
    layers: int = 3
    omega0: float = 30.0
    # [encoding]
    encoding: str = "none"  # "none" or "fourier" (Gaussian Fourier features, Tancik et al. 2020)
    fourier_features: int = 256  # mapping size m: the network sees 2m inputs
    fourier_sigma: float = 6.0  # standard deviation of the random frequencies B
    # [optimizer]
    optimizer: str = "adam"
    lr: float = 1e-4
    lr_min: float = 1e-5
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    momentum: float = 0.9
    # [training]
    steps: int = 1000
    batch_size: int = 0  # 0: full batch (every pixel every step)
    seed: int = 0
    checkpoint_every: int = 250
    log_every: int = 10
    preview_every: int = 250
    device: str = "auto"
    matmul: str = "kernel"
    cuda_graph: bool = True
    # [data]
    source: str = ""  # image or CSV path; "" means the built-in sample
    size: int = 0  # resize images so the longer side is this; 0 keeps them as they are
    gray: bool = False


# TOML section -> {key in the file: Config field}.
SECTIONS = {
    "network": {"model": "model", "hidden": "hidden", "layers": "layers", "omega0": "omega0"},
    "encoding": {"name": "encoding", "features": "fourier_features", "sigma": "fourier_sigma"},
    "optimizer": {"name": "optimizer", "lr": "lr", "lr_min": "lr_min", "beta1": "beta1", "beta2": "beta2",
                  "eps": "eps", "momentum": "momentum"},
    "training": {k: k for k in ("steps", "batch_size", "seed", "checkpoint_every", "log_every", "preview_every",
                                "device", "matmul", "cuda_graph")},
    "data": {"source": "source", "size": "size", "gray": "gray"},
}
FIELD_TYPES = {f.name: f.type for f in fields(Config)}
ENCODINGS = ("none", "fourier")
CHOICES = {"model": MODELS, "optimizer": OPTIMIZERS, "device": DEVICES, "matmul": MATMULS, "encoding": ENCODINGS}
POSITIVE = ("hidden", "layers", "omega0", "fourier_features", "fourier_sigma", "lr", "beta1", "beta2", "eps", "steps", "checkpoint_every", "log_every")
NON_NEGATIVE = ("lr_min", "momentum", "batch_size", "seed", "preview_every", "size")


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
    """Flat {field: value} from a config file, checked for unknown keys and types."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: config file not found")
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a UTF-8 text file") from None
    values = {}
    for section, table in document.items():
        if section not in SECTIONS:
            raise UsageError(f"{path}: unknown section [{section}] (known: {', '.join(SECTIONS)})")
        if not isinstance(table, dict):
            raise UsageError(f"{path}: '{section}' must be a [section]")
        for key, value in table.items():
            name = SECTIONS[section].get(key)
            if name is None:
                known = ", ".join(SECTIONS[section])
                raise UsageError(f"{path}: unknown key '{section}.{key}' (known in [{section}]: {known})")
            values[name] = _coerce(f"{path}: {section}.{key}", name, value)
    return values


def _coerce(where: str, name: str, value):
    expected = FIELD_TYPES[name]
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


def validate(config: Config) -> Config:
    for name, choices in CHOICES.items():
        value = getattr(config, name)
        if value not in choices:
            raise UsageError(f"{name} '{value}' is not one of: {', '.join(choices)}")
    for name in POSITIVE:
        if not getattr(config, name) > 0:
            raise UsageError(f"{name} must be positive, got {getattr(config, name)}")
    for name in NON_NEGATIVE:
        if getattr(config, name) < 0:
            raise UsageError(f"{name} must not be negative, got {getattr(config, name)}")
    if config.lr_min > config.lr:
        raise UsageError(f"lr_min ({config.lr_min}) must not exceed lr ({config.lr})")
    if not (config.beta1 < 1 and config.beta2 < 1):
        raise UsageError("beta1 and beta2 must be below 1")
    return config


def build_config(config_file: Path | None, overrides: dict, preset_name: str | None = None) -> Config:
    """Defaults, then the preset (named, or the chosen model's), then the file, then the flags."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    from_file = read_toml(config_file) if config_file else {}
    if preset_name is None:
        model = overrides.get("model") or from_file.get("model") or Config.model
        if model not in MODELS:
            raise UsageError(f"model '{model}' is not one of: {', '.join(MODELS)}")
        preset_name = MODEL_PRESETS[model]
    preset = read_toml(preset_path(preset_name))
    return validate(replace(Config(), **{**preset, **from_file, **overrides}))


def to_toml(config: Config) -> str:
    values = asdict(config)
    lines = ["# Effective configuration of this run (inr train --config accepts this file)."]
    for section, keys in SECTIONS.items():
        lines.append(f"\n[{section}]")
        for key, name in keys.items():
            lines.append(f"{key} = {_toml_value(values[name])}")
    return "\n".join(lines) + "\n"


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)
