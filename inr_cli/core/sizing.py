"""Settings that follow the image's size.

A SIREN's omega0, the Fourier features' sigma and the hash grid's finest level set the highest frequency
the network draws easily,
in cycles across the image, while the pixels set the highest one the image holds (its Nyquist
frequency, half the pixel count across). Fixed values tuned at 256 px draw noise between the pixels of
a 48-px image and render it at 2x worse than Lanczos. So where the configuration leaves them at 0
(the presets do), they grow with the training image's longer side, within a range; a positive value
(--omega0, --fourier-sigma, a config file) is kept as given. The rates and ranges come from
benchmarks/upscaling.py (BENCHMARKS.md, "Draw well at every size").
"""

from __future__ import annotations

from inr_cli.config import Config, with_values

AUTO = 0.0  # the value that asks for a setting chosen from the size
SIZED_KEYS = ("network.omega0", "encoding.sigma", "encoding.max_resolution")

OMEGA0_PER_PIXEL, OMEGA0_RANGE = 0.3, (15.0, 60.0)
# The sigmoid preset asks for it (configs/sigmoid.toml): at 128 px sigma 3.5 / 6 / 10 rendered 2x
# +0.32 / -2.80 / -10.67 dB against Lanczos on coffee and +1.35 / +1.17 / -2.06 on the cub drawing;
# the fourier preset's tuning agrees (3 at 128 px its best 2x, 6-8 at 256).
SIGMA_PER_PIXEL, SIGMA_RANGE = 0.027, (2.0, 10.0)


def chosen(rate: float, bounds: tuple[float, float], longer: int) -> float:
    low, high = bounds
    return float(round(min(max(rate * longer, low), high), 1))


def fit_to_image(config: Config, width: int, height: int) -> tuple[Config, list[str]]:
    """The configuration with every size-following setting decided for a width x height training
    image, and one line per choice saying what was chosen and why."""
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
        finest = max(longer, config.encoding.min_resolution)
        values["encoding.max_resolution"] = finest
        if config.encoding.name == "hashgrid":
            reasons.append(f"hash grid of {config.encoding.levels} levels, {config.encoding.min_resolution} to "
                           f"{finest} cells across (the finest one cell a pixel of the {longer}-px image); "
                           f"--hash-max-res sets it by hand")
    return (with_values(config, values) if values else config), reasons
