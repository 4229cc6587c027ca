"""Settings that follow the image's size.

A SIREN's omega0, the Fourier features' sigma and the hash grid's finest level set the highest frequency
the network draws easily,
in cycles across the image, while the pixels set the highest one the image holds (its Nyquist
frequency, half the pixel count across). Fixed values tuned at 256 px draw noise between the pixels of
a 48-px image and render it at 2x worse than Lanczos. So where the configuration leaves them at 0
(the presets do), they grow with the training image's longer side, within a range; a positive value
(--omega0, --fourier-sigma, a config file) is kept as given. The rates and ranges come from
benchmarks/upscaling.py (BENCHMARKS.md, "Draw well at every size").

The network's size follows the image too. A hash grid's tables left at 0 (the hashgrid preset) are
sized by table_for_image: the largest tables for which the whole network, stored as network.dtype
says, takes no more bytes than the image's own 8-bit pixels, so that a thumbnail gets a small grid
and a gigapixel a large one (the trade measured: BENCHMARKS.md, "A model sized to the image"). A
byte budget (network.max_bytes, --max-bytes) sizes any network: the hash grid's tables, or the
hidden width (and the Fourier features with it) of a network without one.
"""

from __future__ import annotations

import math
from dataclasses import replace

from inr_cli.config import Config, budget_bytes, with_values
from inr_cli.core.encodings import level_resolutions, table_entries
from inr_cli.errors import UsageError
from inr_cli.limits import MAX_LOG2_TABLE_SIZE

AUTO = 0.0  # the value that asks for a setting chosen from the size
SIZED_KEYS = ("network.omega0", "encoding.sigma", "encoding.max_resolution", "encoding.log2_table_size",
              "encoding.levels")

OMEGA0_PER_PIXEL, OMEGA0_RANGE = 0.3, (15.0, 60.0)
# The sigmoid preset asks for it (configs/sigmoid.toml): at 128 px sigma 3.5 / 6 / 10 rendered 2x
# +0.32 / -2.80 / -10.67 dB against Lanczos on coffee and +1.35 / +1.17 / -2.06 on the cub drawing;
# the fourier preset's tuning agrees (3 at 128 px its best 2x, 6-8 at 256).
SIGMA_PER_PIXEL, SIGMA_RANGE = 0.027, (2.0, 10.0)

BYTES_PER_PARAMETER = {"float32": 4, "float16": 2}
# The smallest network a byte budget may give: tables of 16 entries a level (a hash grid), or hidden
# layers 8 wide; a budget below it is refused.
SMALLEST_TABLE, SMALLEST_WIDTH = 16, 8
# An image smaller than this on its longer side keeps tables that hold every level's vertices: its
# own bytes would hash the finer levels many times over, which draws noise between the pixels when
# the image is drawn larger (at 128 px, 2x renders 0.9 dB below Lanczos where the dense tables are
# 0.3 dB above it; BENCHMARKS.md, "A model sized to the image").
SMALLEST_SIZED_SIDE = 256
# Levels left at 0: the paper's 16 where the tables hold every level whole or are as large as inr's
# go; 8 where the budget hashes the finer levels, each then with twice the entries: at the image's
# bytes 8 levels fitted a crop of Kodak 1 dB better in 300 steps and a 512-px photo 0.5 dB, while
# more levels draw a small image better between its pixels. An image under SMALLEST_SIZED_SIDE gets
# 32: the creases of more levels' bilinear cells, at more pitches, sum closer to a smooth surface
# (ten Kodak photos at 96 px drawn 2x, SSIM against Lanczos's with 16 / 24 / 32 / 48 levels: -0.0014 /
# +0.0011 / +0.0015 / +0.0013; BENCHMARKS.md, "Drawing larger: 2x, 4x and 8x").
LEVELS_WHOLE, LEVELS_HASHED, LEVELS_SMALL_IMAGE = 16, 8, 32


def chosen(rate: float, bounds: tuple[float, float], longer: int) -> float:
    low, high = bounds
    return float(round(min(max(rate * longer, low), high), 1))


def image_bytes(width: int, height: int, channels: int) -> int:
    """The image's own size: one byte a channel a pixel."""
    return width * height * channels


def model_bytes(parameters: int, dtype: str) -> int:
    """The bytes a network of this many parameters takes, stored as dtype (network.dtype)."""
    return parameters * BYTES_PER_PARAMETER[dtype]


def fit_to_image(config: Config, width: int, height: int, channels: int) -> tuple[Config, list[str]]:
    """The configuration with every size-following setting decided for a width x height training
    image of `channels` channels, and one line per choice saying what was chosen and why."""
    longer = max(width, height)
    values, reasons = {}, []
    if config.network.omega0 == AUTO:
        omega0 = chosen(OMEGA0_PER_PIXEL, OMEGA0_RANGE, longer)
        values["network.omega0"] = omega0
        if config.network.model == "siren":
            reasons.append(f"omega0 {omega0:g} for a {longer}-px image ({OMEGA0_PER_PIXEL:g} per pixel of the longer "
                           f"side, {OMEGA0_RANGE[0]:g} to {OMEGA0_RANGE[1]:g}; higher draws noise between the "
                           f"pixels); --omega0 sets it by hand")
    if config.encoding.sigma == AUTO:
        sigma = chosen(SIGMA_PER_PIXEL, SIGMA_RANGE, longer)
        values["encoding.sigma"] = sigma
        if config.encoding.name == "fourier":
            reasons.append(f"Fourier sigma {sigma:g} for a {longer}-px image ({SIGMA_PER_PIXEL:g} per pixel of the "
                           f"longer side, {SIGMA_RANGE[0]:g} to {SIGMA_RANGE[1]:g}); --fourier-sigma sets it by hand")
    if config.encoding.max_resolution == AUTO:
        # One cell a pixel at the finest level: a finer grid only adds entries that no pixel tells
        # apart (and draws noise between the pixels).
        values["encoding.max_resolution"] = max(longer, config.encoding.min_resolution)
    config = with_values(config, values) if values else config
    return _sized_to_budget(config, width, height, channels, reasons)


def table_for_image(config: Config, width: int, height: int, channels: int) -> float:
    """The sizing rule: log2 of the entries of each level's table of a hash grid (its levels and their
    range decided: fit_to_image) for a width x height image of `channels` channels. The largest table
    for which the whole network (tables and head) takes at most the byte budget (network.max_bytes,
    by default the image's 8-bit bytes) stored as network.dtype says; never more entries than its
    finest level's vertices, which would stay unused (whole_table), nor fewer than SMALLEST_TABLE.
    Without a budget named, an image smaller than SMALLEST_SIZED_SIDE on its longer side gets them
    all. Counted, not allocated: a gigapixel's is as quick as a thumbnail's."""
    budget = _budget(config, width, height, channels)
    low, high = SMALLEST_TABLE, whole_table(config)
    if budget is None and max(width, height) < SMALLEST_SIZED_SIDE:
        return math.log2(high)
    most = (budget or image_bytes(width, height, channels)) // BYTES_PER_PARAMETER[config.network.dtype]
    if _parameters(config, channels, log2_table_size=math.log2(high)) <= most:
        return math.log2(high)
    while low < high:  # the largest entries that fit (the count grows with them)
        middle = (low + high + 1) // 2
        if _parameters(config, channels, log2_table_size=math.log2(middle)) <= most:
            low = middle
        else:
            high = middle - 1
    return math.log2(low)


def whole_table(config: Config) -> int:
    """The most entries a level's table can use: the finest level's vertices, or inr's largest table."""
    grid = config.encoding
    finest = level_resolutions(grid.levels, grid.min_resolution, grid.max_resolution)[-1]
    return min((finest + 1) ** 2, 1 << MAX_LOG2_TABLE_SIZE)


def _budget(config: Config, width: int, height: int, channels: int) -> int | None:
    """network.max_bytes in bytes ("image": the image's 8-bit bytes), or None where it names none."""
    given = budget_bytes(config.network.max_bytes)
    return image_bytes(width, height, channels) if given == "image" else given


def _parameters(config: Config, channels: int, **encoding) -> int:
    """The parameter count of the network config gives (its sizes decided), with the encoding's
    settings changed as given (log2_table_size=, features=) and network.hidden= as `hidden`."""
    from inr_cli.core.network import NetworkSpec  # network.py imports this module's users

    hidden = encoding.pop("hidden", config.network.hidden)
    resized = replace(config, encoding=replace(config.encoding, **encoding),
                      network=replace(config.network, hidden=hidden))
    spec = NetworkSpec(out_features=channels, **{field: resized.get(key) for field, key in _spec_keys(resized)})
    return spec.parameter_count()


def _spec_keys(config: Config):
    from inr_cli.core.network import SETTING_OF, _used

    return [(field, key) for field, key in SETTING_OF.items() if _used(field, config.encoding.name)]


def _sized_to_budget(config: Config, width: int, height: int, channels: int,
                     reasons: list[str]) -> tuple[Config, list[str]]:
    """config with the hash grid's table decided and the network held to its byte budget, and the
    reasons with a line on the network's bytes where a budget or the table's size was at stake."""
    dtype, given = config.network.dtype, config.network.max_bytes
    budget = _budget(config, width, height, channels)
    against = image_bytes(width, height, channels)
    values: dict = {}
    grid = config.encoding
    if grid.name == "hashgrid":
        by_hand = grid.log2_table_size != AUTO
        sized = config
        if grid.levels == AUTO and budget is None and not by_hand and max(width, height) < SMALLEST_SIZED_SIDE:
            sized = with_values(config, {"encoding.levels": LEVELS_SMALL_IMAGE})
        elif grid.levels == AUTO:  # the paper's 16, unless the budget hashes them: then 8 (LEVELS_HASHED)
            sized = with_values(config, {"encoding.levels": LEVELS_WHOLE})
            if not by_hand and table_for_image(sized, width, height, channels) < math.log2(whole_table(sized)):
                sized = with_values(config, {"encoding.levels": LEVELS_HASHED})
        if not by_hand or budget is not None:
            log2 = table_for_image(sized, width, height, channels)
            if by_hand:  # a table set by hand is the largest the budget may keep
                log2 = min(log2, grid.log2_table_size)
            sized = with_values(sized, {"encoding.log2_table_size": log2})
        count, levels = _parameters(sized, channels), sized.encoding.levels
        if budget is not None and model_bytes(count, dtype) > budget:
            raise UsageError(f"--max-bytes {given}: the smallest hash grid of these settings (tables of "
                             f"{SMALLEST_TABLE} entries, {levels} levels x {grid.level_features} features, "
                             f"{config.network.layers}x{config.network.hidden} {config.network.model}) takes "
                             f"{model_bytes(count, dtype):,} bytes in {dtype}; name a larger budget or a smaller "
                             f"network")
        entries = table_entries(sized.encoding.log2_table_size)
        how = ("by hand (--hash-log2-size)" if by_hand and budget is None else
               f"for --max-bytes {given}" if budget is not None else
               f"holding every vertex (an image under {SMALLEST_SIZED_SIDE} px)"
               if max(width, height) < SMALLEST_SIZED_SIDE else "for the image's 8-bit bytes")
        reasons.append(f"hash grid of {levels} levels, {sized.encoding.min_resolution} to "
                       f"{sized.encoding.max_resolution} cells across, tables of {entries:,} entries a level {how}: "
                       f"{count:,} parameters, {_size(model_bytes(count, dtype))} in {dtype}, "
                       f"{model_bytes(count, dtype) / against:.2f}x the image's {_size(against)}; --hash-levels, "
                       f"--hash-log2-size, --hash-max-res and --max-bytes set it by hand")
        return sized, reasons
    if budget is None:
        return config, reasons
    count = _parameters(config, channels)
    if model_bytes(count, dtype) > budget:
        widest = config.network.hidden
        fourier = config.encoding.features if grid.name == "fourier" else None
        low, high = SMALLEST_WIDTH, widest
        while low < high:  # the widest layers that fit, the Fourier features shrunk alike
            middle = (low + high + 1) // 2
            if model_bytes(_parameters(config, channels, **_narrowed(middle, widest, fourier)), dtype) <= budget:
                low = middle
            else:
                high = middle - 1
        changes = _narrowed(low, widest, fourier)
        count = _parameters(config, channels, **changes)
        if low > widest or model_bytes(count, dtype) > budget:
            raise UsageError(f"--max-bytes {given}: the narrowest {config.network.model} network of these settings "
                             f"({config.network.layers} hidden layers of {min(SMALLEST_WIDTH, widest)}) takes "
                             f"{model_bytes(count, dtype):,} bytes in {dtype}; name a larger budget or fewer layers")
        values["network.hidden"] = changes["hidden"]
        if fourier is not None:
            values["encoding.features"] = changes["features"]
        config = with_values(config, values)
        shrunk = f"hidden layers {widest} -> {low} wide" + (f", Fourier features {fourier} -> {changes['features']}"
                                                            if fourier is not None else "")
        reasons.append(f"{shrunk} for --max-bytes {given}: {count:,} parameters, {_size(model_bytes(count, dtype))} "
                       f"in {dtype}, {model_bytes(count, dtype) / against:.2f}x the image's {_size(against)}")
    return config, reasons


def _narrowed(hidden: int, widest: int, fourier: int | None) -> dict:
    """A width, and the Fourier features shrunk in its proportion (where the network has them)."""
    changes = {"hidden": hidden}
    if fourier is not None:
        changes["features"] = max(1, fourier * hidden // widest)
    return changes


def _size(count: int) -> str:
    """Bytes as a reader sees them: 1.18 MB, 196.6 kB, 812 bytes."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"
