"""A network's description (NetworkSpec) read back from a file: every field checked for its type and
bounds before anything is sized from it, so that a tampered checkpoint, network.json or plan is one
line, never a traceback or an allocation of the size it claims."""

from __future__ import annotations

import json
import math

from inr_cli.core.network import IN_FEATURES, NetworkSpec, beyond_limits
from inr_cli.limits import MAX_CHANNELS
from inr_cli.settings import ENCODINGS, MODELS

HASH_FIELDS = ("hash_levels", "hash_features", "hash_log2_size", "hash_min_resolution", "hash_max_resolution")

FIELD_TYPES = {"model": str, "out_features": int, "hidden": int, "layers": int, "omega0": float, "encoding": str,
               "fourier_features": int, "fourier_sigma": float, "in_features": int,
               **{name: int for name in HASH_FIELDS}, "hash_log2_size": float, "linear_output": bool}
# in_features came later (always 2), the hash grid's fields with it (a description without a hash grid leaves them
# out), and linear_output later still (left out where False).
REQUIRED = tuple(name for name in FIELD_TYPES if name not in ("in_features", "linear_output", *HASH_FIELDS))


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
    fault = beyond_limits(values)
    if fault:
        raise BadDescription(fault)
    return NetworkSpec(**values)


def _typed(name: str, value):
    expected = FIELD_TYPES[name]
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if (isinstance(value, bool) and expected is not bool) or not isinstance(value, expected):
        kind = {str: "text", int: "an integer", float: "a number", bool: "true or false"}[expected]
        raise BadDescription(f"'{name}' is {_shown(value)}, expected {kind}")
    return value


def _shown(value) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _check_bounds(values: dict) -> None:
    """Each field's own bounds, before beyond_limits weighs the sizes against inr's limits."""
    def within(name: str, low: int, high: int | None = None) -> None:
        if values[name] < low or (high is not None and values[name] > high):
            expected = f"{low} to {high}" if high is not None else f"at least {low}"
            raise BadDescription(f"'{name}' is {values[name]}, expected {expected}")

    if values["model"] not in MODELS:
        raise BadDescription(f"unknown model {_shown(values['model'])} (known: {', '.join(MODELS)})")
    if values["encoding"] not in ENCODINGS:
        raise BadDescription(f"unknown encoding {_shown(values['encoding'])} (known: {', '.join(ENCODINGS)})")
    within("out_features", 1, MAX_CHANNELS)
    within("hidden", 1)
    within("layers", 1)
    if values["encoding"] == "fourier":
        within("fourier_features", 1)
    elif values["fourier_features"] != 0:
        raise BadDescription(f"'fourier_features' is {values['fourier_features']} without a Fourier encoding")
    if values["encoding"] == "hashgrid":
        missing = [name for name in HASH_FIELDS if name not in values]
        if missing:
            raise BadDescription(f"the hash grid's description has no '{missing[0]}'")
        for name in HASH_FIELDS[:-1]:
            within(name, 1)
        within("hash_max_resolution", values["hash_min_resolution"])
    else:
        for name in HASH_FIELDS:
            if values.get(name, 0) != 0:
                raise BadDescription(f"'{name}' is {values[name]} without a hash grid")
    if values.get("in_features", IN_FEATURES) != IN_FEATURES:
        raise BadDescription(f"'in_features' is {values['in_features']}; inr's networks take {IN_FEATURES} "
                             f"coordinates (u, v)")
    for name in ("omega0", "fourier_sigma", "hash_log2_size"):
        value = values.get(name, 0.0)
        if not (math.isfinite(value) and value >= 0):
            raise BadDescription(f"'{name}' is {value}, expected a finite number, not negative")
