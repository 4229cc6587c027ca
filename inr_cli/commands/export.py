from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from inr_cli.commands.paths import named_file, output_target, run_sources
from inr_cli.errors import UsageError
from inr_cli.formats import export as exporter
from inr_cli.formats.modulated import read_base, write_latent_set
from inr_cli.formats.network_set import BASE, is_network_set, load_network_set
from inr_cli.loading import one_network, require_input
from inr_cli.settings import Dtype

NAME = "export"
HELP = ("Write a trained network for other tools: -o model.safetensors (weights, named per layer) or "
        "-o model.onnx (the whole function: coordinates in, colours out); a set (an inr fit-many folder) as "
        "-o set.safetensors (each layer stacked over the networks) or -o set_0-N.hdf5 (the file neural-field-arena "
        "reads, fit-a-nef's layout).")
NEEDS_ARGS = True


def command(
    run: Path = typer.Argument(..., metavar="RUN|SET", help="Run directory, checkpoint.npz, an inr fit-many folder "
                               "(the whole set, or one network with --image), or a .safetensors file inr export "
                               "wrote (one network again, as .onnx say)."),
    output: str = typer.Option(..., "-o", "--output", metavar="FILE",
                                help="model.safetensors, model.onnx or (a set) set.hdf5."),
    image: Optional[str] = typer.Option(None, "--image", metavar="NAME", help="With a set (an inr fit-many folder or "
                                        "its export): export only this image's network."),
    dtype: Optional[Dtype] = typer.Option(None, "--dtype", metavar="TYPE", help="Store the parameters as float32 "
                                          "or float16 (half the bytes; read back as float32). Default: the run's "
                                          "--dtype (float32 for a set)."),
    force: bool = typer.Option(False, "--force", help="Replace the file named by -o if it exists."),
) -> None:
    output = named_file(output)
    require_input(run)  # before -o is weighed against what RUN would be
    suffix = output.suffix.lower()
    if suffix not in {**exporter.FORMATS, **exporter.SET_FORMATS}:  # checked before any work
        raise UsageError(f"{output}: unknown export format '{output.suffix}' (use .safetensors, .onnx or, "
                         f"for a set, .hdf5)")
    whole_set = image is None and is_network_set(run)
    if whole_set and suffix not in exporter.SET_FORMATS:
        raise UsageError(f"{output}: a set of networks is exported whole as .safetensors or .hdf5; for ONNX name "
                         f"one network with --image NAME")
    if not whole_set and suffix not in exporter.FORMATS:
        raise UsageError(f"{output}: .hdf5 holds a whole inr fit-many set (neural-field-arena's file); export one "
                         f"network as .safetensors or .onnx")
    output = output_target(output, None, force, [run, *run_sources(run, image)])
    if whole_set and suffix == ".hdf5":
        import inr_cli

        nets = inr_cli.load(run)
        view = nets.view()
        if dtype not in (None, "float32"):
            raise UsageError(f"{output}: a set's .hdf5 holds fit-a-nef's float32 weights; --dtype {dtype} is for "
                             f".safetensors")
        exporter.write_set_hdf5(nets.spec, nets.weights, nets.channels, nets.names,
                                view.labels if nets.labelled else None, view.label_names, output, nets.base)
    elif whole_set:
        networks = load_network_set(run)
        names = [row["name"] for row in networks.index]
        if networks.base is not None:
            if dtype not in (None, "float32"):
                raise UsageError(f"{output}: a set of latents is exported in float32 (its latents are "
                                 f"{networks.latent} numbers an image); leave out --dtype {dtype}")
            write_latent_set(networks.base, networks.channels, networks.weights, names, networks.index, output,
                             read_base(Path(run) / BASE)[2])
        else:
            exporter.write_set_safetensors(networks.spec, networks.weights, networks.channels, names, output,
                                           networks.index, dtype or "float32")
    else:
        network = one_network(run, image)
        exporter.export(network.spec, network.params, network.channels, output, (network.width, network.height),
                        dtype or network.dtype)
    typer.echo(str(output))
