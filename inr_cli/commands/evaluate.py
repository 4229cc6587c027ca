from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from PIL import Image

from inr_cli.backends import make_backend
from inr_cli.commands.paths import shown_path
from inr_cli.config import Device, build_config, flags_to_values
from inr_cli.console import info, notice
from inr_cli.core.canvas import WHOLE_CANVAS_PIXELS
from inr_cli.core.metrics import psnr, ssim
from inr_cli.core.render import score_drawing
from inr_cli.errors import InrError, UsageError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.data import load_training_data, same_data
from inr_cli.formats.images import fit_longer_side, resample, resize
from inr_cli.outputs import folder_output
from inr_cli.runs.directory import holds_run
from inr_cli.runs.start import preset_for_size, sized_preset_note
from inr_cli.runs.training import run_training

NAME = "eval"
HELP = ("PSNR and SSIM of the network's render against a reference image, CSV or .npy array. With --train-size: "
        "train on a downscaled reference (or reuse RUN), render at full size, compare with Lanczos and bicubic.")
NEEDS_ARGS = True


def command(
    run: Path = typer.Argument(..., metavar="RUN", help="Run directory or checkpoint.npz (with --train-size: created "
                               "if absent)."),
    reference: Path = typer.Argument(..., metavar="REFERENCE", help="Reference image, pixel CSV or .npy array; "
                                     "rendered at its size."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    device: Device = typer.Option("auto", "--device", metavar="auto|cpu|gpu", show_default=False,
                                  help="Where to draw: auto uses the GPU when CuPy finds one. Default: auto."),
    train_size: Optional[int] = typer.Option(None, "--train-size", metavar="N",
                                             help="Train on the reference shrunk so its longer side is N."),
    preset: Optional[str] = typer.Option(None, "--preset", metavar="NAME", help="Preset for the training run "
                                         "(default: inr train's for the shrunk image: hashgrid from 96x64 pixels, "
                                         "else siren; inr presets lists them)."),
    steps: Optional[int] = typer.Option(None, "--steps", metavar="N", help="Steps for the training run (default: "
                                        "the preset's)."),
) -> None:
    if train_size is not None and train_size <= 0:
        raise UsageError(f"--train-size must be a positive number of pixels, got {train_size}")
    ref = load_training_data(str(reference))
    if train_size is not None and ref.width * ref.height > WHOLE_CANVAS_PIXELS:
        raise UsageError(f"--train-size compares against Lanczos and bicubic upscales held whole as floats; "
                         f"{reference} is {ref.width}x{ref.height}, more than {WHOLE_CANVAS_PIXELS >> 20} megapixels: "
                         f"score a trained run against it without --train-size")
    if train_size is not None and train_size >= max(ref.width, ref.height):
        raise UsageError(f"--train-size {train_size} is not smaller than {reference}'s longer side "
                         f"({max(ref.width, ref.height)} px): there is nothing to draw larger; give a smaller "
                         f"--train-size, or score a run against it without --train-size")
    reused = train_size is not None and ckpt.resolve_exists(run)
    if train_size is not None and not reused:
        run_dir = run.parent if run.suffix == ".npz" else run  # RUN may name the checkpoint to be
        folder_output(run_dir, holds_run, "run of inr train", "RUN")
        small = resize(ref, train_size)
        sized = None if preset else preset_for_size(small.width, small.height)  # the road inr train takes
        config = build_config(None, flags_to_values({"steps": steps, "device": device,
                                                     "source": str(reference.resolve()),
                                                     "size": train_size, "preview_every": 0}), preset or sized)
        if not as_json:
            if sized:
                info(sized_preset_note(small.width, small.height, sized))
            info(f"training {config.network.model} on {reference.name} at {small.width}x{small.height} -> "
                 f"{shown_path(run)}")
        run_training(config, small, run_dir, None, quiet=as_json)
    saved = ckpt.load(run, moments=False)
    if saved.channels == ("l",) and ref.channels != ("l",):
        ref = load_training_data(str(reference), gray=True)
    if ref.n_channels != saved.spec.out_features:
        raise InrError(f"{reference} has channels {','.join(ref.channels)}, the network draws "
                       f"{','.join(saved.channels)}")
    if train_size is None:
        _say_shape_differs(saved.data_shape[1], saved.data_shape[0], ref.width, ref.height, reference)
    elif reused:
        _check_trained_on(saved, resize(ref, train_size), run, reference, train_size)
    backend = make_backend(device, quiet=as_json)
    scores = score_drawing(backend, saved.spec, saved.params, ref)  # a strip at a time, every pixel
    result = {
        "psnr": round(scores.psnr(), 4),
        "ssim": round(scores.ssim(), 5),
        "step": saved.step,
        "params": saved.spec.parameter_count(),
        "width": ref.width,
        "height": ref.height,
    }
    if train_size is not None:
        small = resize(ref, train_size)
        result["train_width"], result["train_height"] = small.width, small.height
        reference_values = ref.values
        for name, method in (("lanczos", Image.LANCZOS), ("bicubic", Image.BICUBIC)):
            upscaled = resample(small.values, ref.width, ref.height, method)
            result[name] = {"psnr": round(psnr(upscaled, reference_values), 4),
                            "ssim": round(ssim(upscaled, reference_values), 5)}
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(f"inr      PSNR {result['psnr']:.2f} dB  SSIM {result['ssim']:.4f}  "
               f"({ref.width}x{ref.height}, step {saved.step}, {result['params']} parameters)")
    for name in ("lanczos", "bicubic"):
        if name in result:
            typer.echo(f"{name:8s} PSNR {result[name]['psnr']:.2f} dB  SSIM {result[name]['ssim']:.4f}  "
                       f"(upscaled from {result['train_width']}x{result['train_height']})")


def _check_trained_on(saved, small, run: Path, reference: Path, train_size: int) -> None:
    """A run reused by --train-size was trained on the very image the baselines upscale (the
    reference shrunk to --train-size): another size or other pixels would score the network beside
    Lanczos and bicubic from another image."""
    trained_w, trained_h = saved.data_shape[1], saved.data_shape[0]
    if (trained_w, trained_h) != (small.width, small.height):
        raise UsageError(f"{shown_path(run)} was trained at {trained_w}x{trained_h}, not at {small.width}x"
                         f"{small.height} ({reference} at --train-size {train_size}): beside Lanczos and bicubic from "
                         f"another size its score would not compare; give --train-size {max(trained_w, trained_h)}, "
                         f"or a new RUN directory (eval trains one there)")
    if not same_data(small, saved.data_fingerprint):
        raise UsageError(f"{shown_path(run)} was trained on other pixels than {reference} shrunk to {small.width}x"
                         f"{small.height}: Lanczos and bicubic would upscale another image than the one it learned; "
                         f"give a new RUN directory (eval trains one there), or leave out --train-size to score it")


def _say_shape_differs(trained_w: int, trained_h: int, ref_w: int, ref_h: int, reference: Path) -> None:
    """eval renders at the reference's size: legitimate, and said; another aspect ratio would stretch
    the picture, which no PSNR would tell, so it is refused."""
    if (trained_w, trained_h) == (ref_w, ref_h):
        return
    same_aspect = (abs(trained_w * ref_h - ref_w * trained_h) <= 0.02 * trained_w * ref_h
                   or (ref_w, ref_h) == fit_longer_side(trained_w, trained_h, max(ref_w, ref_h)))
    if not same_aspect:
        raise InrError(f"{reference} is {ref_w}x{ref_h}, another aspect ratio than the {trained_w}x{trained_h} the "
                       f"network was trained at: its render would be stretched to be scored; give a reference of "
                       f"the training image's shape")
    notice(f"trained at {trained_w}x{trained_h}, rendered at the reference's {ref_w}x{ref_h}")
