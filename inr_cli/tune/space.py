"""What a study searches: fitting settings of the one settings table (settings.py), each over a range.

RANGES is the table, keyed by setting key: the range a study searches for that setting unless
`--search KEY=LOW:HIGH` says otherwise. DEFAULT_KEYS are the settings that matter most, searched
when they apply to the network: the frequency of the first layer (omega0 for a SIREN, sigma for
Fourier features), a hash grid's table size and levels, the learning rate and where its cosine
ends, the initialisation's scale, width and depth. A setting given on the command line (a flag or
--set) is fixed and not searched.

Width and depth may be held under a parameter budget (--max-params): the ranges are narrowed to
what the smallest network of the space leaves, and a trial drawn above the budget is rejected
before it trains (told to Optuna as pruned, so that the sampler learns the edge, and not counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inr_cli import settings
from inr_cli.config import Config, with_values
from inr_cli.core.network import NetworkSpec
from inr_cli.core.sizing import fit_to_image
from inr_cli.errors import UsageError


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    log: bool = False
    per: str = ""  # searched as a fraction of this key's value (lr_min as a share of lr: never above it)


def _siren(config: Config) -> bool:
    return config.network.model == "siren"


def _fourier(config: Config) -> bool:
    return config.encoding.name == "fourier"


def _hashgrid(config: Config) -> bool:
    return config.encoding.name == "hashgrid"


# The default ranges (a key the settings table lacks is left out).
_TABLE = {
    "network.omega0": Range(10.0, 90.0),
    "encoding.sigma": Range(1.0, 20.0, log=True),
    "optimizer.lr": Range(1e-5, 3e-2, log=True),
    "optimizer.lr_min": Range(1e-3, 1.0, log=True, per="optimizer.lr"),
    "network.weight_scale": Range(0.5, 4.0, log=True),
    "network.hidden": Range(16, 512, log=True),
    "network.layers": Range(1, 6),
    "encoding.features": Range(16, 512, log=True),
    "encoding.log2_table_size": Range(10, 22),
    "encoding.levels": Range(4, 24),
    "encoding.level_features": Range(1, 8, log=True),
    "encoding.min_resolution": Range(2, 64, log=True),
}
RANGES = {key: value for key, value in _TABLE.items() if key in settings.BY_KEY}
# Searched by default, where the network has them.
DEFAULT_KEYS = {"network.omega0": _siren, "encoding.sigma": _fourier, "encoding.log2_table_size": _hashgrid,
                "encoding.levels": _hashgrid, "optimizer.lr": None, "optimizer.lr_min": None,
                "network.weight_scale": _siren, "network.hidden": None, "network.layers": None}
# What --search may name: the numeric settings that shape the fit (not the budget, seed or data).
SEARCHABLE = [s.key for s in settings.SETTINGS if s.fits and s.type in (int, float)
              and (s.section in ("network", "encoding", "optimizer") or s.key == "training.batch_size")]
SIZE_KEYS = ("network.hidden", "network.layers", "encoding.features", "encoding.log2_table_size", "encoding.levels",
             "encoding.level_features")
MAX_REJECTED = 200  # draws in a row above the budget before the study gives up on the space


@dataclass(frozen=True)
class Dimension:
    key: str
    low: float
    high: float
    log: bool = False
    per: str = ""

    @property
    def name(self) -> str:
        """The parameter's name in the study: the key, or `key/field` for a fraction of another key."""
        return f"{self.key}/{self.per.split('.')[1]}" if self.per else self.key

    @property
    def integer(self) -> bool:
        return settings.BY_KEY[self.key].type is int and not self.per

    def suggest(self, trial):
        if self.integer:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def value(self, suggested, values: dict):
        """The setting's value for a suggested parameter."""
        return float(suggested * values[self.per]) if self.per else suggested

    def parameter(self, config: Config):
        """The parameter that gives config's own value, or None where that lies outside the range."""
        value = config.get(self.key)
        if self.per:
            value = value / config.get(self.per) if config.get(self.per) else math.inf
        return value if self.low <= value <= self.high else None

    def describe(self) -> str:
        what = f"{self.key} as a fraction of {self.per}" if self.per else self.key
        scale = ", log" if self.log else ""
        return f"{what} {self.low:g}..{self.high:g}{scale}"


@dataclass
class Space:
    dimensions: tuple[Dimension, ...]
    base: dict  # the configured value of each key a fraction is taken of, for when it is not searched
    max_params: int | None = None

    def suggest(self, trial) -> dict:
        """{setting key: value} for one trial, drawn in the table's order (lr before lr_min)."""
        values: dict = {}
        for dimension in self.dimensions:
            values[dimension.key] = dimension.value(dimension.suggest(trial), {**self.base, **values})
        return values

    def start(self, config: Config) -> dict:
        """{parameter name: value} of config's own settings that lie in the space: the study's first
        trial, so that the settings a person starts from are measured beside the ones it finds."""
        found = {d.name: d.parameter(config) for d in self.dimensions}
        return {name: value for name, value in found.items() if value is not None}

    def describe(self) -> list[str]:
        return [d.describe() for d in self.dimensions]

    def to_json(self) -> dict:
        return {"dimensions": [[d.key, d.low, d.high, d.log, d.per] for d in self.dimensions],
                "max_params": self.max_params}


def parse_search(text: str) -> tuple[str, float, float, bool | None]:
    """`KEY=LOW:HIGH[:log|:linear]` -> (key, low, high, log; None: the table's)."""
    key, equals, bounds = text.partition("=")
    key = key.strip()
    parts = [part.strip() for part in bounds.split(":")]
    if not equals or len(parts) not in (2, 3):
        raise UsageError(f"--search {text}: expected KEY=LOW:HIGH (or KEY=LOW:HIGH:log), "
                         f"e.g. --search network.omega0=20:80")
    if key not in settings.BY_KEY:
        raise UsageError(f"--search {text}: unknown key '{key}'")
    if key not in SEARCHABLE:
        raise UsageError(f"--search {text}: {key} cannot be searched (searchable: {', '.join(SEARCHABLE)})")
    try:
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        raise UsageError(f"--search {text}: LOW and HIGH must be numbers") from None
    log = None
    if len(parts) == 3:
        if parts[2] not in ("log", "linear"):
            raise UsageError(f"--search {text}: the scale is log or linear, not '{parts[2]}'")
        log = parts[2] == "log"
    return key, low, high, log


def build_space(config: Config, fixed: set[str], searches: list[str], max_params: int | None,
                channels: int, width: int, height: int) -> Space:
    """The space of a study on images of width x height with `channels`: the default keys that apply
    to config's network and are not `fixed` (given on the command line), then each --search; every
    range checked against the setting's bounds, and the size keys against the budget."""
    chosen: dict[str, Dimension] = {}
    for key, applies in DEFAULT_KEYS.items():
        if key in RANGES and key not in fixed and (applies is None or applies(config)):
            r = RANGES[key]
            chosen[key] = Dimension(key, r.low, r.high, r.log, r.per)
    for text in searches:
        key, low, high, log = parse_search(text)
        if key in fixed:
            raise UsageError(f"--search {text}: {key} is also fixed on the command line; search it or fix it")
        table = RANGES.get(key)
        if log is None:
            log = table.log if table is not None and not table.per else False
        chosen[key] = Dimension(key, low, high, log)
    order = {key: i for i, key in enumerate([*RANGES, *SEARCHABLE])}
    dimensions = sorted(chosen.values(), key=lambda d: order[d.key])
    if not dimensions:
        raise UsageError("nothing to search: every setting of the space is fixed; name one with --search KEY=LOW:HIGH")
    searched = {parse_search(text)[0]: text for text in searches}
    for dimension in dimensions:
        where = (f"--search {searched[dimension.key]}" if dimension.key in searched else
                 f"the default range of {dimension.name} ({dimension.low:g}..{dimension.high:g}; --search "
                 f"{dimension.key}=LOW:HIGH sets another)")
        _check_range(config, dimension, where)
    if max_params is not None:
        if max_params <= 0:
            raise UsageError(f"--max-params must be a positive number of parameters, got {max_params}")
        dimensions = _within_budget(config, dimensions, max_params, channels, width, height)
    return Space(tuple(dimensions), {d.per: config.get(d.per) for d in dimensions if d.per}, max_params)


def _check_range(config: Config, d: Dimension, where: str) -> None:
    setting = settings.BY_KEY[d.key]
    if not (math.isfinite(d.low) and math.isfinite(d.high)) or d.low >= d.high:
        raise UsageError(f"{where}: LOW must be below HIGH, got {d.low:g}:{d.high:g} (a fixed value: --set "
                         f"{d.key}=VALUE)")
    if d.integer and not (float(d.low).is_integer() and float(d.high).is_integer()):
        raise UsageError(f"{where}: {d.key} is an integer, got {d.low:g}:{d.high:g}")
    if d.log and d.low <= 0:
        raise UsageError(f"{where}: a log scale needs LOW above 0, got {d.low:g}")
    if setting.bound == settings.POSITIVE and d.low <= 0:
        raise UsageError(f"{where}: {d.key} must be positive, got LOW {d.low:g}")
    if setting.bound == settings.NON_NEGATIVE and d.low < 0:
        raise UsageError(f"{where}: {d.key} must not be negative, got LOW {d.low:g}")
    if d.per:
        return
    for end in (d.low, d.high):  # each end with the rest as configured: lr_min <= lr, beta < 1, ...
        try:
            with_values(config, {d.key: int(end) if d.integer else float(end)})
        except UsageError as exc:
            raise UsageError(f"{where}: at {end:g}, {exc}") from None


def parameter_count(config: Config, values: dict, channels: int, width: int, height: int) -> int:
    """The parameters of the network config gives with `values` on images of this size."""
    fitted, _ = fit_to_image(with_values(config, values), width, height, channels)
    return NetworkSpec.from_config(fitted, channels).parameter_count()


def _within_budget(config: Config, dimensions: list[Dimension], budget: int, channels: int, width: int,
                   height: int) -> list[Dimension]:
    """The size ranges narrowed to what the budget leaves with every other size at its smallest."""
    sizes = {d.key: d for d in dimensions if d.key in SIZE_KEYS}
    smallest = {key: int(d.low) for key, d in sizes.items()}
    least = parameter_count(config, smallest, channels, width, height)
    if least > budget:
        shape = ", ".join(f"{key.split('.')[1]} {value}" for key, value in smallest.items()) or "as configured"
        raise UsageError(f"--max-params {budget:,}: the smallest network of the space ({shape}) has {least:,} "
                         f"parameters; raise the budget or search smaller sizes")
    narrowed = []
    for d in dimensions:
        if d.key in sizes:
            low, high = int(d.low), int(d.high)
            while low < high:  # the largest value that fits: the count grows with each size
                middle = (low + high + 1) // 2
                if parameter_count(config, {**smallest, d.key: middle}, channels, width, height) <= budget:
                    low = middle
                else:
                    high = middle - 1
            if low == int(d.low):  # nothing above the smallest fits: the size is fixed by the budget
                raise UsageError(f"--max-params {budget:,} leaves {d.key} no room above {low} in this space; "
                                 f"raise the budget, or fix it with --set {d.key}={low}")
            d = Dimension(d.key, d.low, float(low), d.log, d.per)
        narrowed.append(d)
    return narrowed


def start_parameters(space: Space, config: Config, channels: int, width: int, height: int) -> dict:
    """{parameter name: value} of config's own settings (the size's choices made) that lie in the
    space: the study's first trial. A network over the budget is made to fit, narrower first, then
    shallower: the settings a person starts from, as large as the budget allows."""
    start = space.start(fit_to_image(config, width, height, channels)[0])
    sizes = [d for d in space.dimensions if d.key in SIZE_KEYS]
    if space.max_params is None or not sizes:
        return start
    values = {d.key: int(min(max(config.get(d.key), d.low), d.high)) for d in sizes}

    def fits(trying: dict) -> bool:
        return parameter_count(config, trying, channels, width, height) <= space.max_params

    for d in sizes:
        if fits(values):
            break
        low, high = int(d.low), values[d.key]
        while low < high:  # the largest value of this size that fits with the others as they are
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits({**values, d.key: middle}) else (low, middle - 1)
        values[d.key] = low
    return {**start, **{d.name: values[d.key] for d in sizes}}


def reject(config: Config, space: Space, values: dict, channels: int, width: int, height: int) -> str | None:
    """Why a trial's values cannot be trained (over the budget, a configuration refused), or None."""
    try:
        with_values(config, values)
    except UsageError as exc:
        return f"refused: {exc}"
    if space.max_params is not None:
        count = parameter_count(config, values, channels, width, height)
        if count > space.max_params:
            return f"over --max-params ({count:,} parameters)"
    return None
