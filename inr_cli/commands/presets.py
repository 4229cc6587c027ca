"""`inr presets`: the packaged presets, listed; `inr presets NAME`: one of them with every key, as a
file that --config takes (the presets ship inside the package, where a pip user does not look)."""

from __future__ import annotations

from typing import Optional

import typer

from inr_cli.config import MODEL_PRESETS, SET_PRESETS, build_config, presets, to_toml
from inr_cli.console import info
from inr_cli.runs.start import HASH_GRID_PIXELS, HASH_GRID_PRESET

NAME = "presets"
HELP = ("List the packaged presets (what --preset NAME starts from); with NAME, print that preset with every "
        "key, as a file to edit and pass with --config.")
NEEDS_ARGS = False


def command(
    name: Optional[str] = typer.Argument(None, metavar="NAME", help="A preset to print whole (TOML).",
                                         show_default=False),
) -> None:
    if name is not None:
        config = build_config(None, {}, name)  # an unknown name: a usage error that lists the presets
        typer.echo(f"# The {name} preset, every key (inr presets {name} > my.toml; inr train --config my.toml)")
        typer.echo(to_toml(config, every_key=True).split("\n", 1)[1], nl=False)
        return
    for preset in presets():
        typer.echo(f"{preset:8s} {describe(preset)}")
    chosen = ", ".join(f"{preset} for {'--model ' if i == 0 else ''}{model}"
                       for i, (model, preset) in enumerate(MODEL_PRESETS.items()))
    for_sets = ", ".join(f"{preset} for {model}" for model, preset in SET_PRESETS.items()
                         if MODEL_PRESETS[model] != preset)
    info(f"Without --preset: {chosen} (for an image of {HASH_GRID_PIXELS:,} pixels or more, with no --model either, "
         f"{HASH_GRID_PRESET}); inr fit-many and inr meta-init: {for_sets}.")
    info("inr presets NAME prints one with every key: a file to edit and pass to --config.")


def describe(preset: str) -> str:
    """One line: the network, its encoding, learning rate and steps."""
    config = build_config(None, {}, preset)
    network = config.network
    parts = [f"{network.model} {network.layers}x{network.hidden}"]
    if config.encoding.name == "fourier":
        parts.append("Fourier features")
    elif config.encoding.name == "hashgrid":
        parts.append("trained hash grid")
    return ", ".join(parts + [f"lr {config.optimizer.lr:g}", f"{config.training.steps} steps"])
