"""A network's description (NetworkSpec) read back from a file: every field checked for its type and
bounds before anything is sized from it, so that a tampered checkpoint, network.json or plan is one
line, never a traceback or an allocation of the size it claims."""

from __future__ import annotations

import json
import math

from inr_cli.core.network import IN_FEATURES, NetworkSpec
from inr_cli.limits import (
    MAX_CHANNELS,
    MAX_LAYERS,
    MAX_LEVEL_FEATURES,
    MAX_LEVELS,
    MAX_LOG2_TABLE_SIZE,
    MAX_PARAMETERS,
    MAX_RESOLUTION,
    MAX_WIDTH,
)
from inr_cli.settings import ENCODINGS, MODELS

HASH_FIELDS = ("hash_levels", "hash_features", "hash_log2_size", "hash_min_resolution", "hash_max_resolution")

FIELD_TYPES = {"model": str, "out_features": int, "hidden": int, "layers": int, "omega0": float, "encoding": str,
               "fourier_features": int, "fourier_sigma": float, "in_features": int,
               **{name: int for name in HASH_FIELDS}}
# in_features came later (always 2), the hash grid's fields with it (a description without a hash grid leaves them out).
REQUIRED = tuple(name for name in FIELD_TYPES if name != "in_features" and name not in HASH_FIELDS)


class BadDescription(ValueError):
    """What is wrong with a description, in words; the caller names the file."""


def spec_from_json(text: str) -> NetworkSpec:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadDescription(f"not JSON ({str(exc)[:80]})") from None
    return spec_from_dict(document)


def spec_from_dict(document) -> NetworkSpec:
    """A NetworkSpec from the dict a file holds, or BadDescription saying which field is wrong."""
    if not isinstance(document, dict):
        raise BadDescription(f"the network's description is a JSON {type(document).__name__}, not an object")
    unknown = sorted(set(document) - set(FIELD_TYPES))
    if unknown:
        raise BadDescription(f"unknown field '{str(unknown[0])[:40]}' in the network's description")
    missing = [name for name in REQUIRED if name not in document]
    if missing:
        raise BadDescription(f"the network's description has no '{missing[0]}'")
    values = {name: _typed(name, document[name]) for name in document}
    _check_bounds(values)
    spec = NetworkSpec(**values)
    if spec.parameter_count() > MAX_PARAMETERS:
        raise BadDescription(f"a network of {spec.parameter_count():,} parameters is more than inr reads "
                             f"(at most {MAX_PARAMETERS:,})")
    return spec


def _typed(name: str, value):
    expected = FIELD_TYPES[name]
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, expected):
        kind = {str: "text", int: "an integer", float: "a number"}[expected]
        raise BadDescription(f"'{name}' is {_shown(value)}, expected {kind}")
    return value


def _shown(value) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _check_bounds(values: dict) -> None:
    def within(name: str, low: int, high: int) -> None:
        if not low <= values[name] <= high:
            raise BadDescription(f"'{name}' is {values[name]}, expected {low} to {high}")

    if values["model"] not in MODELS:
        raise BadDescription(f"unknown model {_shown(values['model'])} (known: {', '.join(MODELS)})")
    if values["encoding"] not in ENCODINGS:
        raise BadDescription(f"unknown encoding {_shown(values['encoding'])} (known: {', '.join(ENCODINGS)})")
    within("out_features", 1, MAX_CHANNELS)
    within("hidden", 1, MAX_WIDTH)
    within("layers", 1, MAX_LAYERS)
    if values["encoding"] == "fourier":
        within("fourier_features", 1, MAX_WIDTH)
    elif values["fourier_features"] != 0:
        raise BadDescription(f"'fourier_features' is {values['fourier_features']} without a Fourier encoding")
    if values["encoding"] == "hashgrid":
        missing = [name for name in HASH_FIELDS if name not in values]
        if missing:
            raise BadDescription(f"the hash grid's description has no '{missing[0]}'")
        within("hash_levels", 1, MAX_LEVELS)
        within("hash_features", 1, MAX_LEVEL_FEATURES)
        within("hash_log2_size", 1, MAX_LOG2_TABLE_SIZE)
        within("hash_min_resolution", 1, MAX_RESOLUTION)
        within("hash_max_resolution", values["hash_min_resolution"], MAX_RESOLUTION)
    else:
        for name in HASH_FIELDS:
            if values.get(name, 0) != 0:
                raise BadDescription(f"'{name}' is {values[name]} without a hash grid")
    if values.get("in_features", IN_FEATURES) != IN_FEATURES:
        raise BadDescription(f"'in_features' is {values['in_features']}; inr's networks take {IN_FEATURES} "
                             f"coordinates (u, v)")
    for name in ("omega0", "fourier_sigma"):
        if not (math.isfinite(values[name]) and values[name] >= 0):
            raise BadDescription(f"'{name}' is {values[name]}, expected a finite number, not negative")
