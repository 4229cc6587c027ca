"""`inr meta-init` after its options are read: the configuration built as fit-many builds it, the
options checked, the inner fits put in this process or on Ray, progress on stderr (meta.py does the
learning)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from inr_cli.config import META_INIT, SET_PRESETS, build_config, flags_to_values, given_keys, with_values
from inr_cli.console import info, notice
from inr_cli.errors import UsageError
from inr_cli.formats.export import need_writer
from inr_cli.formats.start import (
    base_latent_of,
    is_file_start,
    refuse_base,
    resolved_start,
    start_file,
    start_network,
)
from inr_cli.sets.driver import check_options, settings_on_rerun
from inr_cli.sets.meta import (
    BASE_DEFAULTS,
    BASE_OMEGA0,
    InProcess,
    MetaInterrupted,
    MetaOptions,
    MetaState,
    base_outer_lr,
    learn_start,
    recorded_settings,
)


def meta_init(source: str, out: Path, flags: dict, config_file: Path | None, preset: str | None, options: dict,
              quiet: bool, ray: str | None = None, workers: int | None = None,
              gpus_per_worker: float | None = None, force: bool = False) -> dict:
    options = meta_options(options, ray)
    out = Path(out)
    if out.suffix.lower() != ".safetensors":
        raise UsageError(f"{out}: a start or a base is written as .safetensors")
    check_options(None, ray, workers, gpus_per_worker)
    need_writer("safetensors")  # said before the learning, not after it
    values = flags_to_values({**flags, "source": str(source), "preview_every": 0, "dtype": "float32"})  # as a set's
    config = resolved_start(build_config(config_file, values, preset, SET_PRESETS, command=META_INIT,
                                           start=start_network(values, preset, config_file, SET_PRESETS)))
    given = given_keys(config_file, values, preset)
    init = config.training.init
    _check_base_init(init, options["modulations"])
    # a base's omega0, unless said or a file's network (start_network) sets it; a rerun takes its checkpoint's (below)
    if options["modulations"] and "network.omega0" not in given and not is_file_start(init):
        config = with_values(config, {"network.omega0": BASE_OMEGA0})
    state = MetaState(out)
    state.check_outputs(force, options["outer_steps"], [source, config_file or "",
                                                        start_file(init) if is_file_start(init) else ""], [source])
    # The same command goes on from its checkpoint: what it does not say is what the checkpoint
    # was learned with, whatever this inr's defaults and presets choose now. With --force the
    # command's own settings: a checkpoint learned with others is started afresh.
    saved = None if force else state.read()
    config = settings_on_rerun(config, recorded_settings(saved["settings"], state.path) if saved else {}, given)
    if options["outer_lr"] is None:  # a base's, not said: the checkpoint's, else the one for its depth
        options["outer_lr"] = _checkpointed_rate(saved, "outer_lr") or base_outer_lr(config.network.layers)
    if ray:
        from inr_cli.sets.meta_on_ray import OnRay

        runner = OnRay(ray, workers, gpus_per_worker)
    else:
        from inr_cli.backends import kernel_options, make_backend

        runner = InProcess(make_backend(config.training.device, quiet=quiet, **kernel_options(config.training)))

    def started(facts: dict) -> None:
        spec = facts["spec"]
        shifts = spec.layers * spec.hidden
        if options["modulations"] > shifts:
            notice(f"--modulations {options['modulations']} is more than the {shifts} shifts of a base "
                   f"{spec.layers}x{spec.hidden} (a bias a hidden neuron): {shifts} latents reach every shift, more "
                   f"only make each image's row longer")
        if not quiet:
            again = f"; going on from outer step {facts['step']}" if facts["step"] else ""
            what = f"a base with {options['modulations']} modulations" if options["modulations"] else "a start"
            info(f"meta-init: {what} for {spec.model} {spec.layers}x{spec.hidden} from {facts['images']} images of "
                 f"{source} ({facts['heldout']} held out to measure it), {options['outer_steps']} outer steps of "
                 f"{options['meta_batch']} fits of {options['inner_steps']} steps, on {runner.where}{again}")

    def progress(step: int, total: int, row: dict | None) -> None:
        if row is not None and not quiet:
            info(f"outer step {step}/{total}: held-out PSNR after {options['inner_steps']} inner steps "
                 f"{row['psnr']:.2f} dB ({row['seconds']:.0f} s)")

    try:
        result = learn_start(runner, source, out, config, MetaOptions(**options), progress, started, force)
    except MetaInterrupted as exc:
        learned = "the base" if options["modulations"] else "the start"
        kept = f"{learned} is checkpointed at outer step {exc.step} in {exc.saved}" if exc.step else \
            "no outer step was done yet"
        info(f"{exc}: {kept}; run the same command again to go on")
        raise SystemExit(128 + exc.signum) from None
    if not quiet:
        last = result["log"][-1]["step"]
        what = f"a base with {options['modulations']} modulations" if options["modulations"] else "a start"
        chosen = "" if result["best_step"] == last else \
            f" (the {what[2:]} of outer step {result['best_step']}, whose held-out PSNR is the best measured)"
        info(f"done: {what} for {result['spec'].model} {result['spec'].layers}x{result['spec'].hidden} from "
             f"{result['images']} images ({result['heldout']} held out) on {runner.where} -> {out}{chosen}; "
             f"fit-many --init {out}")
    return result


def _check_base_init(init: str, modulations: int) -> None:
    """--init of a base goes on learning that base: its latent size, not another (which would keep its
    network and drop its map), nor a start (which would drop both map and rates)."""
    if not modulations:
        refuse_base(init, "meta-init --modulations with its latent size goes on learning it")
        return
    latent = base_latent_of(init)
    if latent is not None and latent != modulations:
        raise UsageError(f"--init {init}: a base of {latent} latents an image, not {modulations}; --modulations "
                         f"{latent} goes on learning it, or leave --init out for a base of {modulations}")


def meta_options(given: dict, ray: str | None) -> dict:
    """The options of the command (MetaOptions' fields, None: the default of the kind learned),
    checked: a base's defaults where one is learned (BASE_DEFAULTS), a start's otherwise."""
    defaults = {**MetaOptions().__dict__, **(BASE_DEFAULTS if given.get("modulations") else {})}
    options = {**defaults, **{name: value for name, value in given.items() if value is not None}}
    if given.get("modulations") and given.get("outer_lr") is None:
        options["outer_lr"] = None  # the base's depth chooses it (base_outer_lr), once the network is known
    for name in ("outer_steps", "inner_steps", "meta_batch", "eval_every"):
        if options[name] <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {options[name]}")
    if given.get("modulations") is not None and given["modulations"] < 1:  # 0 is no base: not a start in disguise
        raise UsageError(f"--modulations must be a number of latents (1 or more), got {given['modulations']}; "
                         f"without it meta-init learns a start")
    if not 0 < options["holdout"] < 1:
        raise UsageError(f"--holdout must be a share of the images above 0 and below 1, got {options['holdout']}")
    for name in ("outer_lr", "inner_lr"):
        if options[name] is not None and not (math.isfinite(options[name]) and options[name] > 0):
            raise UsageError(f"--{name.replace('_', '-')} must be a positive number, got {options[name]}")
    if options["modulations"] and ray:
        raise UsageError("--ray fits a start's inner fits on a cluster; a base with modulations is learned in this "
                         "process: leave out --ray")
    return options


def _checkpointed_rate(saved: dict | None, name: str) -> float | None:
    """A rate the checkpoint's learning was run with (None where there is none, or it does not say
    one: a positive number)."""
    try:
        value = json.loads(saved["settings"])["options"][name] if saved else None
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    good = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if good else None
