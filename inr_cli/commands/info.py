from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer

from inr_cli.core.encodings import table_entries
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.sizing import image_bytes, model_bytes
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.network_set import NetworkSet, is_network_set, load_network_set
from inr_cli.loading import exported_contents, is_exported_file, require_input

NAME = "info"
HELP = ("What a run or a set (an inr fit-many folder) holds: network, parameters, step reached, last loss and "
        "PSNR, sizes; for a set, its count, mean and worst PSNR, bytes per image.")
NEEDS_ARGS = True


def command(
    run: Path = typer.Argument(..., metavar="RUN|SET", help="Run directory, checkpoint.npz, an inr fit-many "
                               "folder, or a .safetensors file inr export wrote."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    if is_exported_file(run):
        _exported_info(run, as_json)
        return
    if is_network_set(run):
        _set_info(load_network_set(run), as_json)
        return
    require_input(run)  # a folder that is no run is said as such, and so one that is neither run nor set
    saved = ckpt.load(run, moments=False, deferred=True)  # its description: no array read but a scan
    height, width, channels = saved.data_shape
    loss = saved.last_loss
    result = _network_facts(saved.spec, saved.config.network.dtype, width, height, saved.channels)
    result.update({
        "step": saved.step,
        "total_steps": saved.total_steps,
        "loss": None if loss != loss else loss,
        "psnr": None if loss != loss else round(psnr_from_mse(loss), 4),
        "seconds": round(saved.state.seconds, 3),
    })
    if as_json:
        typer.echo(json.dumps(result))
        return
    lines = _network_lines(saved.spec, result)
    lines[2:2] = [f"step      {saved.step} of {saved.total_steps}",
                  f"loss      {loss:.4e}   PSNR {result['psnr']} dB" if result["loss"] is not None else "loss      -"]
    typer.echo("\n".join(lines))


def _network_facts(spec, dtype: str, width: int, height: int, channels: tuple[str, ...]) -> dict:
    """What --json says of one network trained on a width x height image."""
    return {
        "model": spec.model,
        "hidden": spec.hidden,
        "layers": spec.layers,
        "omega0": spec.omega0 if spec.model == "siren" else None,
        "output": spec.activations()[-1],  # the output layer's activation: linear, or a sigmoid
        "encoding": spec.encoding,
        "fourier_features": spec.fourier_features or None,
        "fourier_sigma": spec.fourier_sigma or None,
        **({"hash_levels": spec.hash_levels, "hash_features": spec.hash_features,
            "hash_log2_size": spec.hash_log2_size, "hash_table_entries": table_entries(spec.hash_log2_size),
            "hash_resolutions": [spec.hash_min_resolution, spec.hash_max_resolution]}
           if spec.encoding == "hashgrid" else {}),
        "params": spec.parameter_count(),
        "width": width,
        "height": height,
        "channels": ",".join(channels),
        "dtype": dtype,
        "model_bytes": model_bytes(spec.parameter_count(), dtype),
        "image_bytes": image_bytes(width, height, len(channels)),
        "bits_per_pixel": round(model_bytes(spec.parameter_count(), dtype) * 8 / (width * height), 4),
    }


def _network_lines(spec, result: dict) -> list[str]:
    """The lines a person reads of _network_facts' result."""
    return [
        f"network   {spec.model}, {spec.layers} hidden x {spec.hidden}"
        + (f", omega0 {spec.omega0:g}" if spec.model == "siren" else f", {result['output']} output")
        + (f", Fourier features m={spec.fourier_features} sigma={spec.fourier_sigma:g}"
           if spec.encoding == "fourier" else "")
        + (f", hash grid of {spec.hash_levels} levels x {spec.hash_features} features, {spec.hash_min_resolution} to "
           f"{spec.hash_max_resolution} cells across, tables of {table_entries(spec.hash_log2_size):,} entries "
           f"(2^{spec.hash_log2_size:.4g})" if spec.encoding == "hashgrid" else ""),
        f"params    {result['params']:,}",
        *([f"image     {result['width']}x{result['height']} ({result['channels']})",
           f"size      model {result['model_bytes']:,} bytes ({result['dtype']}) vs image {result['image_bytes']:,} "
           f"bytes (8-bit) = {result['model_bytes'] / result['image_bytes']:.2f}x, {result['bits_per_pixel']:.3g} "
           f"bits per pixel"] if result["image_bytes"] is not None else
          [f"size      model {result['model_bytes']:,} bytes ({result['dtype']}), channels {result['channels']}"]),
    ]


def _exported_info(path: Path, as_json: bool) -> None:
    """An `inr export` .safetensors file: the set it holds as a set's folder is described, or its one
    network (the training image's size and bytes where the export recorded them)."""
    networks, exported = exported_contents(path)
    if networks is not None:
        _set_info(networks, as_json)
        return
    sized = exported.width > 1 or exported.height > 1
    result = _network_facts(exported.spec, exported.dtype, exported.width, exported.height, exported.channels)
    learned, said = _learned_facts(path, exported.metadata)
    # An export without the training size has no image to weigh the model against; nor has a start or a
    # base, shared by every image of its kind (its size is that of the images it was learned from).
    for key in ("width", "height", "image_bytes", "bits_per_pixel") if not sized else \
            ("image_bytes", "bits_per_pixel") if learned else ():
        result[key] = None
    result["exported"] = True
    result.update(learned)
    if as_json:
        typer.echo(json.dumps(result))
        return
    lines = _network_lines(exported.spec, result)
    if learned and sized:
        said.append(f"images    {exported.width}x{exported.height}, the size it was learned at (what inr render "
                    f"draws it at)")
    lines[2:2] = said
    typer.echo("\n".join(lines))


def _learned_facts(path: Path, metadata: dict) -> tuple[dict, list[str]]:
    """What inr meta-init recorded in a start or a base it wrote (for --json, and the lines saying
    what the file is), or an export's line."""
    from inr_cli.formats.modulated import MODULATIONS, read_base

    if MODULATIONS in metadata:
        base, _, facts = read_base(path)
        rates = (round(float(base.rates.min()), 6), round(float(base.rates.max()), 6))
        shifts = base.spec.layers * base.spec.hidden
        recorded = {"latent": base.latent, "shifts": shifts, "inner_steps": base.inner_steps, "rates": list(rates),
                    "map_params": base.shift_map.size + base.rates.size,
                    **{key: facts[key] for key in ("images", "outer_step", "outer_steps") if key in facts}}
        said = [f"base      {base.latent} latents an image over its {shifts} shifts (map and rates: "
                f"{recorded['map_params']:,} more numbers), fitted in {base.inner_steps} steps at rates "
                f"{rates[0]:.3g} to {rates[1]:.3g}"]
        learned = (f"meta-init outer step {facts['outer_step']} of {facts['outer_steps']}, from {facts['images']} "
                   f"images; " if {"outer_step", "outer_steps", "images"} <= set(facts) else "")
        return {"modulations": recorded}, [*said, f"learned   {learned}fit-many --init {path} fits a set of latents"]
    try:
        facts = json.loads(metadata.get("meta_init", ""))
    except (ValueError, RecursionError):
        facts = None
    if isinstance(facts, dict) and {"outer_step", "outer_steps", "images", "inner_steps"} <= set(facts):
        return {"meta_init": facts}, [
            f"learned   a start, by meta-init for fits of {facts['inner_steps']} steps: outer step "
            f"{facts['outer_step']} of {facts['outer_steps']}, from {facts['images']} images; fit-many --init {path}"]
    return {}, ["file      an inr export (no training step or loss recorded)"]


def _set_info(networks: NetworkSet, as_json: bool) -> None:
    """A set of networks from inr fit-many (its folder, or its export): how many, how good, how big.
    An export of an older inr holds the images' names alone: its PSNR, steps and sizes are not known."""
    spec = networks.spec
    per_image = networks.latent or spec.parameter_count()  # a set of latents: each image's latent alone
    bytes_per_image = per_image * 4
    result = {
        "count": len(networks.index), "model": spec.model, "hidden": spec.hidden, "layers": spec.layers,
        "params_per_image": per_image, "bytes_per_image": bytes_per_image,
        "mean_psnr": None, "worst_psnr": None, "worst_image": None, "image_bytes_mean": None,
        "steps": None, "mean_steps": None, "min_steps": None, "max_steps": None,
    }
    recorded = "psnr" in networks.index[0]
    if recorded:
        psnrs = np.array([float(row["psnr"]) for row in networks.index])
        worst = int(np.argmin(psnrs))
        pixels = np.array([int(r["width"]) * int(r["height"]) for r in networks.index])
        result.update({"mean_psnr": round(float(psnrs.mean()), 4), "worst_psnr": round(float(psnrs[worst]), 4),
                       "worst_image": networks.index[worst]["name"],
                       "image_bytes_mean": float((pixels * len(networks.channels)).mean())})
        # A set fitted with --until-psnr stops each network at its own step: the first row's is not the set's.
        steps = np.array([int(r["steps"]) for r in networks.index])
        median = float(np.median(steps))
        result.update({"steps": int(median) if median.is_integer() else median,
                       "mean_steps": round(float(steps.mean()), 2), "min_steps": int(steps.min()),
                       "max_steps": int(steps.max())})
    if networks.latent:
        result.update(latent=networks.latent, base_params=spec.parameter_count())
    if as_json:
        typer.echo(json.dumps(result))
        return
    network = f"{spec.model}, {spec.layers} hidden x {spec.hidden}"
    what = (f"latents of {networks.latent} numbers over one base ({network}, {spec.parameter_count():,} parameters)"
            if networks.latent else f"networks ({network})")
    if not recorded:
        typer.echo("\n".join([
            f"set       {result['count']} {what}",
            "PSNR      not recorded (an export of an older inr holds the images' names alone)",
            f"size      {bytes_per_image:,} bytes per image (float32)",
        ]))
        return
    stepped = f"{result['steps']} steps each" if result["min_steps"] == result["max_steps"] else \
        (f"steps median {result['steps']:g}, mean {result['mean_steps']:g}, {result['min_steps']} to "
         f"{result['max_steps']} (each stopped at its own: --until-psnr)")
    typer.echo("\n".join([
        f"set       {result['count']} {what}, {stepped}",
        f"PSNR      mean {result['mean_psnr']:.2f} dB, worst {result['worst_psnr']:.2f} dB ({result['worst_image']})",
        f"size      {bytes_per_image:,} bytes per image (float32) vs {result['image_bytes_mean']:,.0f} bytes of "
        f"8-bit pixels = {bytes_per_image / result['image_bytes_mean']:.2f}x",
    ]))
