"""Where the networks of a fit start (training.init): each from its own seed's draw (`random`), all
from one draw of the run's seed (`shared`), or all from the weights in a file (a PATH: an `inr train`
run or checkpoint, a single network exported as .safetensors, or a start learned by `inr meta-init`).

A shared start is what makes a set's weights comparable as representations (Papa et al. 2023): the
same weight means the same thing in every network. Mini-batches stay per image (each network's own
seed) whatever the start.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np

from inr_cli.config import DRAWN_STARTS, ENCODING_PRESETS, MODEL_PRESETS, Config, with_values
from inr_cli.core.network import NetworkSpec, init_networks, set_output_means
from inr_cli.core.state import TrainingState
from inr_cli.errors import InrError, UsageError
from inr_cli.formats import checkpoint as ckpt

DRAWS = DRAWN_STARTS
RANDOM, SHARED = DRAWS


def is_file_start(init: str) -> bool:
    return init not in DRAWS


def check_init(init: str) -> None:
    """A start that names a file must name one that exists, before any work."""
    if is_file_start(init) and not start_file(init).is_file():
        raise InrError(f"--init {init}: not random, shared or a file (a run, checkpoint.npz or .safetensors "
                       f"start)")


def base_latent_of(init: str) -> int | None:
    """The latent size of the base a start names, None where it names no base (its header read alone)."""
    from inr_cli.formats.modulated import base_latent

    return base_latent(start_file(init)) if is_file_start(init) else None


def refuse_base(init: str, instead: str) -> None:
    """A base with modulations given where a start of whole networks is taken: its map and rates
    would be dropped without a word. `instead`: what the command would do with it."""
    latent = base_latent_of(init)
    if latent is not None:
        raise UsageError(f"--init {init}: a base with modulations ({latent} latents an image), not a start of whole "
                         f"networks; {instead}")


def resolved_init(init: str) -> str:
    """training.init as recorded: a file start as an absolute path (the workers and a rerun from
    elsewhere find the same file), checked to exist."""
    check_init(init)
    return str(Path(init).resolve()) if is_file_start(init) else init


def resolved_start(config: Config) -> Config:
    """The configuration with its start as recorded (resolved_init). A file start keeps its own
    output biases (the ones it was learned or trained with, the same for every network) unless
    network.start_output_at_mean sets them to each image's mean colour: the configuration records
    network.init_output_at_mean as that, as the fit does."""
    init = resolved_init(config.training.init)
    values = {"training.init": init}
    if is_file_start(init):
        values["network.init_output_at_mean"] = config.network.start_output_at_mean
    return with_values(config, values)


def start_network(values: dict, preset_name: str | None = None, config_file: Path | None = None,
                  model_presets: dict[str, str] = MODEL_PRESETS) -> dict:
    """What a file start (training.init in `values`, the command line's) says of the network where
    neither a preset nor a --config file names one: its network's settings, and the preset tuned for
    that network under "preset" (build_config's `start`); {} otherwise."""
    init = values.get("training.init") or ""
    if preset_name is not None or config_file is not None or init in ("", *DRAWN_STARTS):
        return {}
    check_init(init)
    spec, _ = read_start(init)
    return {**spec.settings(), "preset": ENCODING_PRESETS.get(spec.encoding, model_presets[spec.model])}


def start_file(init: str) -> Path:
    path = Path(init)
    return path / ckpt.FILENAME if path.is_dir() else path


def start_sha256(init: str) -> str:
    """The content of a file start (its sha256), so that a set notices a start changed under it;
    "" for the draws."""
    if not is_file_start(init):
        return ""
    digest = hashlib.sha256()
    try:
        with open(start_file(init), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise InrError(f"--init {init}: cannot read it ({exc.strerror or exc})") from None
    return digest.hexdigest()


def read_start(init: str) -> tuple[NetworkSpec, np.ndarray]:
    """The network description and the [P] float32 weights of a file start."""
    path = start_file(init)
    if path.suffix.lower() == ".safetensors":
        from inr_cli.formats.exported import read_exported
        from inr_cli.formats.modulated import is_latent_set_file

        if is_latent_set_file(path):
            raise InrError(f"{path}: a set of latents, not one start; the base it was fitted over is a start "
                           f"(the set folder's base.safetensors)")

        exported = read_exported(path)
        if exported.stacked:
            raise InrError(f"{path}: a set of {len(exported.params)} networks, not one start; export one "
                           f"network with inr export SET --image NAME")
        return exported.spec, exported.params[0]
    saved = ckpt.load(path, moments=False)
    return saved.spec, np.asarray(saved.params, dtype=np.float32)


def spec_difference(start: NetworkSpec, wanted: NetworkSpec) -> str:
    """The fields where two descriptions differ: `hidden 32 (the start) vs 64`."""
    return ", ".join(f"{f.name} {getattr(start, f.name)} (the start) vs {getattr(wanted, f.name)}"
                     for f in dataclasses.fields(NetworkSpec) if getattr(start, f.name) != getattr(wanted, f.name))


def start_params(init: str, spec: NetworkSpec) -> np.ndarray:
    """A file start's [P] weights, refused in one line when its network is not `spec`."""
    start_spec, params = read_start(init)
    if start_spec != spec:
        raise InrError(f"--init {init}: its network is not the one these settings fit "
                       f"({spec_difference(start_spec, spec)}); fit with the start's settings or learn one for these")
    return params


def initial_params(init: str, spec: NetworkSpec, run_seed: int, seeds, output_means=None,
                   start: np.ndarray | None = None, weight_scale: float = 1.0) -> np.ndarray:
    """[N, P] step-0 parameters of the networks with seeds `seeds` (their own draws for random, the
    run seed's draw for shared, the file's weights for a PATH, `start` when already read). The
    output biases start at output_means where given (network.init_output_at_mean; for a file start
    network.start_output_at_mean, see resolved_start); the hidden weights of the draws are scaled by
    weight_scale (network.weight_scale), a file start keeps its own."""
    seeds = list(seeds)
    if init == RANDOM:
        return init_networks(spec, seeds, output_means, weight_scale)
    if init == SHARED:
        return init_networks(spec, [run_seed] * len(seeds), output_means, weight_scale)
    params = start_params(init, spec) if start is None else start
    params = np.array(np.broadcast_to(params, (len(seeds), spec.parameter_count())), dtype=np.float32, order="C")
    if output_means is not None:
        set_output_means(spec, params, output_means)
    return params


def initial_state(init: str, spec: NetworkSpec, run_seed: int, seeds, output_means=None,
                  start: np.ndarray | None = None, weight_scale: float = 1.0) -> TrainingState:
    """TrainingState.fresh with the start of training.init (initial_params)."""
    seeds = list(seeds)
    return TrainingState(initial_params(init, spec, run_seed, seeds, output_means, start, weight_scale), None, None,
                         0, 0.0, np.full(len(seeds), np.nan))
