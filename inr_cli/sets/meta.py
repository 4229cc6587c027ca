"""`inr meta-init FOLDER -o start.safetensors`: a start learned from images of one kind with Reptile
(Nichol et al. 2018, first-order), on the batched engine. Each outer step fits a pack of images
(drawn from the outer step and the seed) for k inner steps from the current start, through the
Trainer and step loop fit-many uses, then moves the start toward the mean of the adapted weights:
start += outer_lr * (mean(adapted) - start), outer_lr decaying linearly to 0 over the outer steps.
The inner fits run at the optimiser's peak rate, held (lr_min = lr, no warm-up): they stand for the first steps
of a fit from the start, whose cosine runs over its whole budget and has barely begun to decay there
(a cosine over the k steps instead learned a start that needed more steps, BENCHMARKS.md).

Held-out images (a seeded share, never drawn for an outer step) are fitted for k inner steps from the
start every `eval_every` outer steps; their mean PSNR after k steps is the CSV's and the chart's
measure of progress. The state (the start, the outer step, the log) is checkpointed beside the
output, every `eval_every` outer steps and when a signal ends the command, so the same command
resumes where it stopped and learns the start an uninterrupted run learns; the start records its
network description.

The inner fits run where a Runner puts them: in this process (InProcess, here) or on a Ray cluster
(meta_on_ray.OnRay); either way each image's fit is the same to the bit on machines whose BLAS
adds a product's terms in the same order (its own seed, and a network's fit does not depend on the
others of its pack), so the start is too; on other processors, the same within rounding.
"""

from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli.config import ADDED_KEYS, KEY_TYPES, Config, with_values
from inr_cli.core.memory import check_training
from inr_cli.core.metrics import psnr_from_mse
from inr_cli.core.network import NetworkSpec, set_output_means
from inr_cli.core.pixels import PixelImage
from inr_cli.core.sizing import fit_to_image
from inr_cli.core.state import TrainingState
from inr_cli.core.trainer import Trainer
from inr_cli.core.training_loop import Diverged, Interrupted, Signals, run_steps
from inr_cli.errors import InrError, UsageError
from inr_cli.formats import npz
from inr_cli.formats.atomic import atomic_path, atomic_write_text
from inr_cli.formats.data import fingerprint
from inr_cli.formats.export import size_metadata, write_safetensors
from inr_cli.formats.input_files import check_regular
from inr_cli.formats.network_description import spec_from_json
from inr_cli.formats.start import is_file_start, start_sha256
from inr_cli.limits import MAX_METADATA_BYTES
from inr_cli.outputs import check_parent, refuse_inputs, refuse_inside, side_files, takes_files, writable
from inr_cli.sets import inputs
from inr_cli.sets.meta_common import InnerFitsDiverged, first_start, outer_rate
from inr_cli.sets.plan import image_seed


@dataclass(frozen=True)
class MetaOptions:
    outer_steps: int = 500
    inner_steps: int = 32  # k
    meta_batch: int = 8  # images per outer step: one pack
    outer_lr: float = 1.0
    holdout: float = 0.1  # share of the images kept out to measure the start
    eval_every: int = 10
    # A base with modulations of this many latents per image (meta_base.py) instead of a start; 0: a start
    modulations: int = 0
    meta_sgd: bool = True  # a base's latent rates learned (meta-SGD), else held at inner_lr
    inner_lr: float = 0.1  # a base's latent rate at first

    def recorded(self) -> dict:
        """The options a checkpoint records: a start's as before bases existed (so that its checkpoints
        resume), a base's all."""
        fields = dict(self.__dict__)
        if not self.modulations:
            for name in ("modulations", "meta_sgd", "inner_lr"):
                fields.pop(name)
        return fields


# The options' defaults for a base, where they differ from a start's: functa's 3 inner steps (and
# the outer rate of base_outer_lr)
BASE_DEFAULTS = {"inner_steps": 3}
SHALLOW_BASE_LAYERS = 3  # the deepest base Adam's outer rate of 1e-3 was measured to learn well


def base_outer_lr(layers: int) -> float:
    """A base's outer rate for Adam, learning in hundreds to thousands of outer steps (functa's 3e-6 is
    for 500,000 of them): 1e-3 up to 3 hidden layers; deeper, 3e-4, as the gradient through more
    sines is steeper (at 1e-3 a 6-layer base learned no letters and an 8-layer one fell apart;
    BENCHMARKS.md, "Sets of latents")."""
    return 1e-3 if layers <= SHALLOW_BASE_LAYERS else 3e-4


# A base's omega0 unless one is given: functa's 30 on coordinates in [0, 1] is 15 on ours in [-1, 1]
# (BENCHMARKS.md, "Sets of latents", has 15 against 30 on the suite)
BASE_OMEGA0 = 15.0


def load_images(source: str, config: Config) -> tuple[list[PixelImage], list[str], Config]:
    listed = inputs.list_inputs(source)
    if len(listed) < 3:
        raise InrError(f"{source}: {len(listed)} images; a start is learned from a few at least (held-out ones too)")
    images = [inputs.load(item.location, item.name, config)[0] for item in listed]
    first = images[0]
    for image, item in zip(images, listed):
        if (image.width, image.height, image.channels) != (first.width, first.height, first.channels):
            raise InrError(f"{item.name} is {image.width}x{image.height} {','.join(image.channels)} but "
                           f"{listed[0].name} is {first.width}x{first.height} {','.join(first.channels)}; pass "
                           f"--size N (and --gray) so that every image has one shape: --size shrinks the "
                           f"larger images and never enlarges, so N at most the smallest image's longer side")
    config, _ = fit_to_image(config, first.width, first.height, first.n_channels)
    return images, [item.name for item in listed], config


def inner_fit(backend, spec: NetworkSpec, config: Config, start: np.ndarray, images: list[PixelImage],
              seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The images fitted from `start` for training.steps steps, as one pack: (params [n, P], losses [n]);
    each from its own mean colour where network.start_output_at_mean asks, as a fit from the start will."""
    check_training(spec, config, images[0].width, images[0].height, len(images), backend,
                   doing=f"the inner fits of {len(images)} images")
    params = np.array(np.broadcast_to(start, (len(images), start.size)), dtype=np.float32, order="C")
    if config.network.start_output_at_mean:
        set_output_means(spec, params, [image.mean_colour() for image in images])
    state = TrainingState(params, None, None, 0, 0.0, np.full(len(images), np.nan))
    trainer = Trainer(backend, spec, config, images, state, seeds)
    try:
        losses = run_steps(trainer, Signals(), config.training.steps)
    except Diverged as exc:
        raise InnerFitsDiverged(exc.describe(int(np.argmax(exc.which)))) from None
    return trainer.state().params, losses


class InProcess:
    """The inner fits in this process, each call one pack on one backend."""

    def __init__(self, backend):
        self.backend = backend
        self.where = backend.name

    def prepare(self, spec: NetworkSpec, inner: Config, images: list[PixelImage], names: list[str],
                seeds: list[int]) -> None:
        self.spec, self.inner, self.images, self.seeds = spec, inner, images, seeds

    def fit(self, start: np.ndarray, chosen) -> tuple[np.ndarray, np.ndarray]:
        """The images at `chosen` fitted from `start` for the inner steps: (params [n, P], losses [n])."""
        return inner_fit(self.backend, self.spec, self.inner, start, [self.images[i] for i in chosen],
                         [self.seeds[i] for i in chosen])

    def close(self) -> None:
        pass


class MetaInterrupted(Interrupted):
    """A signal ended the learning; the start is checkpointed at outer step `step`."""

    def __init__(self, signum: int, step: int, saved: Path):
        super().__init__(signum)
        self.step, self.saved = step, saved


def reptile_step(start: np.ndarray, adapted: np.ndarray, rate: float) -> np.ndarray:
    """The start moved toward the mean of the adapted weights ([n, P]), in float64."""
    return start + rate * (adapted.astype(np.float64).mean(axis=0) - start)


class MetaState:
    """The checkpoint beside the output (OUT.meta.npz), the log (OUT.csv) and the chart (OUT.svg).
    The start is kept in float64, as the outer loop holds it, so that a resumed run goes on from the
    very same start. The checkpoint is read as untrusted (each array checked from its header before
    it is read, every field checked, NaN refused), and it records a fingerprint of every image, so
    that a run resumed on images changed since is refused, as `inr train --resume` refuses one."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.path = self.out.with_name(self.out.name + ".meta.npz")
        self.log = self.out.with_name(self.out.stem + ".csv")
        self.chart = self.out.with_name(self.out.stem + ".svg")

    def check_outputs(self, force: bool, outer_steps: int, protected=(), inside=()) -> None:
        """The output policy (outputs.py) for the start and the files named after it, before any
        learning: the start's folder takes files; none of them is an input, inside the input folder
        or a FIFO; each is absent, written by this command (as its checkpoint shows: the log from the
        first checkpoint, the start and the chart once finished), or replaced with --force."""
        check_parent(self.out)
        takes_files(self.out.parent, f"-o {self.out}")
        refuse_inside(self.out, inside)
        files = [self.out, self.log, self.chart, self.path]
        for path in files:
            refuse_inputs(path, protected)
            writable(path)
        try:
            saved = self.read()
        except InrError:
            if not force:
                raise
            saved = None
        total = outer_steps if saved is None else min(outer_steps, _outer_steps(saved["settings"]) or outer_steps)
        finished = saved is not None and saved["step"] >= total
        own = [] if saved is None else [self.path, self.log] + ([self.out, self.chart] if finished else [])
        side_files(files, force, own)

    def read(self) -> dict | None:
        """The checkpoint's fields, each checked, or None where there is none."""
        if not os.path.lexists(self.path):
            return None
        check_regular(self.path, expected="a meta-init checkpoint")
        with npz.Archive(self.path, str(self.path), "meta-init checkpoint") as archive:
            def need(name: str, kinds: str, dimensions: int) -> np.ndarray:
                if name not in archive.headers:
                    raise archive.damaged(f"'{name}' is missing")
                shape, dtype = archive.headers[name]
                if dtype.kind not in kinds or len(shape) != dimensions or dtype.itemsize > MAX_METADATA_BYTES:
                    raise archive.damaged(f"'{name}' is a {shape} array of {dtype}")
                return archive[name]

            start = need("start", "f", 1)
            best = need("best", "f", 1) if "best" in archive.headers else start  # a checkpoint of an older inr
            # What a method keeps beside its θ (a base's Adam moments), as long as θ
            extra = {name[len(EXTRA):]: need(name, "f", 1) for name in archive.headers if name.startswith(EXTRA)}
            step, settings = int(need("step", "iu", 0)), str(need("settings", "U", 0))
            log = _log_rows(str(need("log", "U", 0)), archive)
            # {name: fingerprint} of the images it learned from; a checkpoint of an older inr has none
            fingerprints = _fingerprints(str(need("fingerprints", "U", 0)), archive) \
                if "fingerprints" in archive.headers else {}
        if best.shape != start.shape or any(array.shape != start.shape for array in extra.values()):
            raise InrError(f"{self.path}: damaged meta-init checkpoint, its start and its best start differ in size")
        if not all(np.isfinite(array).all() for array in (start, best, *extra.values())):
            raise InrError(f"{self.path}: damaged meta-init checkpoint, its start holds NaN or infinite values")
        if step < 0 or any(row["step"] > step for row in log):
            raise InrError(f"{self.path}: damaged meta-init checkpoint, outer step {step} with a log up to step "
                           f"{max((row['step'] for row in log), default=0):g}")
        return {"start": start.astype(np.float64), "best": best.astype(np.float64), "step": step, "log": log,
                "settings": settings, "fingerprints": fingerprints,
                "extra": {name: array.astype(np.float64) for name, array in extra.items()}}

    def load(self, settings: str, parameters: int, outer_steps: int, fingerprints: dict[str, str],
             force: bool = False, extra: tuple[str, ...] = ()) -> tuple | None:
        """(start, step, log, best, {name: array} of `extra`) to go on from: `best` the start of the
        best held-out measure so far; None to start afresh (no checkpoint, or with --force one that
        does not fit)."""
        try:
            saved = self.read()
            if saved is None:
                return None
            change = settings_change(saved["settings"], settings, self.path)
            if change:  # another setting is a usage error, as a fit-many rerun's; other images are not
                error = InrError if change == OTHER_IMAGES else UsageError
                raise error(f"{self.path} was learned with {change}; use another -o (--force starts again)")
            if saved["start"].shape != (parameters,) or set(saved["extra"]) != set(extra):
                raise InrError(f"{self.path}: damaged meta-init checkpoint, a start of {saved['start'].size} "
                               f"parameters, not of {parameters}")
            if saved["step"] > outer_steps:
                raise UsageError(f"{self.path} is at outer step {saved['step']} already; --outer-steps is the "
                                 f"learning's total: pass more than {saved['step']} to learn longer (--force starts "
                                 f"again)")
            known = saved["fingerprints"]
            if known:
                changed = sorted(name for name, digest in fingerprints.items() if known.get(name) != digest)
                if changed:
                    raise InrError(f"{changed[0]} has changed since {self.path} was learned from it (its pixels "
                                   f"differ); restore it, or --force starts again")
        except InrError:
            if not force:
                raise
            return None
        return saved["start"], saved["step"], saved["log"], saved["best"], saved["extra"]

    def save(self, start: np.ndarray, step: int, log: list[dict], best: np.ndarray, settings: str,
             fingerprints: dict[str, str], extra: dict[str, np.ndarray] | None = None) -> None:
        with atomic_path(self.path, suffix=".npz") as tmp:
            with open(tmp, "wb") as handle:
                np.savez(handle, start=start, step=np.int64(step), log=json.dumps(log), best=best, settings=settings,
                         fingerprints=json.dumps(fingerprints, sort_keys=True),
                         **{EXTRA + name: array for name, array in (extra or {}).items()})
        lines = ["outer_step,heldout_loss,heldout_psnr,seconds"] + [
            f"{r['step']},{r['loss']:.8g},{r['psnr']:.4f},{r['seconds']:.2f}" for r in log]
        atomic_write_text(self.log, "\n".join(lines) + "\n")


EXTRA = "extra_"  # a checkpoint's arrays of a method's own state


# What else the outer steps depend on (the draws, the batches, the inner fits' products), recorded in
# the checkpoint since it was written with them
RUN_KEYS = ("training.seed", "training.batch_size", "training.precision", "network.weight_scale",
            "network.init_output_at_mean")


def recorded_settings(text: str, where: Path) -> dict:
    """{key: value} of the settings a checkpoint's `settings` (learn_start's) records: its network's
    and its optimizer's, an optimizer key added since at its legacy value."""
    try:
        document = json.loads(text)
        values = spec_from_json(document["spec"]).settings()
        for name, value in document["config"].items():
            key = f"optimizer.{name}"
            values[key] = value if KEY_TYPES[key] is str else KEY_TYPES[key](value)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise InrError(f"{where}: damaged meta-init checkpoint, its settings are not a record of them") from None
    return {**{key: value for key, value in ADDED_KEYS.items() if key.startswith("optimizer.")}, **values}


OTHER_IMAGES = "other images"


LONGER = ("outer_steps",)  # the options a rerun may change: the total, which it extends


def _outer_steps(settings: str) -> int:
    """The total of outer steps a checkpoint's learning was run for (0 where it does not say)."""
    try:
        return int(json.loads(settings)["options"]["outer_steps"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return 0


def settings_change(saved: str, wanted: str, where: Path) -> str | None:
    """What differs between the settings a checkpoint was learned with and `wanted`, in words (the
    first option, the images, the first setting), or None."""
    was, now = recorded_settings(saved, where), recorded_settings(wanted, where)  # the saved one checked first
    old, new = json.loads(saved), json.loads(wanted)
    options = old["options"] if isinstance(old.get("options"), dict) else {}
    for name, value in new["options"].items():
        # --outer-steps is the learning's total: a larger one learns longer from where it stopped, its
        # outer rate's schedule stretched to the new total (as --steps does for inr train --resume).
        if name not in LONGER and options.get(name) != value:
            return f"--{name.replace('_', '-')} {options.get(name)}, not {value}"
    if old.get("names") != new["names"]:
        return OTHER_IMAGES
    if old.get("inner_lr") != new["inner_lr"]:
        return "another inner learning rate"
    if old.get("inner_outputs") != new.get("inner_outputs"):  # recorded only when on
        return "--start-output-at-mean" if old.get("inner_outputs") else "--no-start-output-at-mean"
    run = old.get("run") if isinstance(old.get("run"), dict) else new["run"]  # older checkpoints: unknown
    if run.get("start", new["run"]["start"]) != new["run"]["start"]:
        return "another start (--init: another file, or a draw against a file)"
    key = next((key for key in RUN_KEYS if key in run and run[key] != new["run"][key]), None)
    if key is not None:
        return f"{key} = {run[key]!r}, not {new['run'][key]!r}"
    key = next((key for key in {**was, **now} if was.get(key) != now.get(key)), None)
    return None if key is None else f"{key} = {was.get(key)!r}, not {now.get(key)!r}"


def _fingerprints(text: str, archive: npz.Archive) -> dict[str, str]:
    try:
        found = json.loads(text)
    except (ValueError, RecursionError):
        found = None
    if not isinstance(found, dict) or not all(isinstance(value, str) for value in found.values()):
        raise archive.damaged("its 'fingerprints' are not one per image")
    return found


def _log_rows(text: str, archive: npz.Archive) -> list[dict]:
    """The checkpoint's log: a JSON list of {step, loss, psnr, seconds}, every value a number."""
    try:
        rows = json.loads(text)
    except (ValueError, RecursionError):
        raise archive.damaged("its 'log' is not JSON") from None
    fields = ("step", "loss", "psnr", "seconds")
    if not isinstance(rows, list) or not all(
            isinstance(row, dict) and set(row) == set(fields)
            and all(isinstance(row[key], (int, float)) and not isinstance(row[key], bool) for key in fields)
            for row in rows):
        raise archive.damaged("its 'log' is not a list of outer steps' measures")
    return rows


class Reptile:
    """A start moved toward the mean of the weights its inner fits reach (reptile_step), the fits
    done by a runner (InProcess, or meta_on_ray.OnRay); θ is the start itself."""

    extra: tuple[str, ...] = ()  # nothing kept beside θ

    def __init__(self, runner, spec: NetworkSpec, config: Config, options: MetaOptions, images, names, seeds,
                 training):
        self.runner, self.spec, self.config, self.options = runner, spec, config, options
        self.images, self.names, self.seeds, self.training = images, names, seeds, training
        self.inner = with_values(config, {"training.steps": options.inner_steps, "training.target_psnr": 0.0,
                                          "optimizer.lr_min": config.optimizer.lr, "optimizer.warmup": 0})
        self.where = runner.where
        self.size = spec.parameter_count()

    def first(self) -> np.ndarray:
        return first_start(self.config, self.spec, [self.images[i] for i in self.training])

    def prepare(self) -> None:
        self.runner.prepare(self.spec, self.inner, self.images, self.names, self.seeds)

    def step(self, theta: np.ndarray, kept: dict, step: int, chosen) -> tuple[np.ndarray, dict]:
        adapted, _ = self.runner.fit(theta.astype(np.float32), chosen)
        return reptile_step(theta, adapted, outer_rate(self.options, step)), kept

    def heldout_loss(self, theta: np.ndarray, heldout) -> float:
        return float(np.mean(self.runner.fit(theta.astype(np.float32), heldout)[1]))

    def write(self, theta: np.ndarray, out: Path, facts: dict) -> None:
        first = self.images[0]  # every image of a meta-init is of one size: the start's, as an export's
        write_safetensors(self.spec, theta.astype(np.float32), first.channels, out,
                          {"meta_init": json.dumps({"method": "reptile", **facts}),
                           **size_metadata((first.width, first.height))})

    def close(self) -> None:
        self.runner.close()


def learn_start(runner, source: str, out: Path, config: Config, options: MetaOptions, progress=None,
                started=None, force: bool = False) -> dict:
    """Reptile on the images of `source`, the inner fits done by `runner` (InProcess, or
    meta_on_ray.OnRay); writes `out` (the start, as a single network's safetensors), its log (CSV)
    and chart (SVG). With options.modulations, a base with modulations instead (meta_base.py), on
    InProcess's backend. started({images, heldout, spec, step}) is told once the images are read and
    any checkpoint loaded; progress(step, total, row|None) each outer step. Returns the log and the
    counts. A signal checkpoints the last whole outer step and raises MetaInterrupted; inner fits
    that blow up checkpoint it too and are one line (InnerFitsDiverged). `force`: a checkpoint that
    does not fit these settings or images is started afresh, not refused."""
    images, names, config = load_images(source, config)
    spec = NetworkSpec.from_config(config, images[0].n_channels)
    seed = config.training.seed
    seeds = [image_seed(seed, name) for name in names]
    order = np.random.default_rng([seed, 0x4D455441]).permutation(len(images))
    held = max(1, int(round(options.holdout * len(images))))
    heldout, training = sorted(order[:held].tolist()), order[held:]
    if not len(training):
        raise UsageError(f"--holdout {options.holdout:g} keeps all {len(images)} images of {source} out to measure; "
                         f"a start is learned from the others: give a smaller share")
    if options.modulations:
        from inr_cli.sets.meta_base import ModulatedLearning

        method = ModulatedLearning(runner, spec, config, options, images, training)
    else:
        method = Reptile(runner, spec, config, options, images, names, seeds, training)
    recorded = {"options": options.recorded(), "spec": spec.to_json(), "names": names, "inner_lr": "held",
                "config": {k: str(v) for k, v in sorted(vars(config.optimizer).items())}}
    if config.network.start_output_at_mean:  # only when on: a checkpoint written before it resumes
        recorded["inner_outputs"] = "each image's mean"
    recorded["run"] = {**{key: config.get(key) for key in RUN_KEYS},
                       "start": start_sha256(config.training.init) or "shared"}  # random is the shared draw here
    settings = json.dumps(recorded, sort_keys=True)
    fingerprints = {name: fingerprint(image) for name, image in zip(names, images)}
    state = MetaState(out)
    saved = state.load(settings, method.size, options.outer_steps, fingerprints, force, method.extra)
    if saved is None:
        start = method.first()
        step, log, best, kept = 0, [], start, {}
    else:
        start, step, log, best, kept = saved
    if started:
        started({"images": len(training), "heldout": len(heldout), "spec": spec, "step": step})
    began = time.perf_counter() - (log[-1]["seconds"] if log else 0.0)
    batch = min(options.meta_batch, len(training))
    with Signals() as signals:
        # The last whole outer step (start, step, log, best, what the method keeps), replaced by one
        # assignment: what a signal checkpoints, whenever it lands.
        done = (start, step, log, best, kept)
        try:
            method.prepare()

            def measure(at: int, theta: np.ndarray) -> dict:
                loss = method.heldout_loss(theta, heldout)
                return {"step": at, "loss": loss, "psnr": psnr_from_mse(loss), "seconds": time.perf_counter() - began}

            if not log:
                log = [measure(0, start)]
                done = (start, step, log, best, kept)
                if progress:
                    progress(0, options.outer_steps, log[-1])
            while step < options.outer_steps:
                chosen = np.random.default_rng([seed, step]).choice(training, size=batch, replace=False)
                moved, kept = method.step(start, kept, step, chosen)
                row = None
                if (step + 1) % options.eval_every == 0 or step + 1 == options.outer_steps:
                    row = measure(step + 1, moved)
                    # The start written is the best measured, not the last: an outer rate too large
                    # for the network makes the held-out PSNR peak early and fall back.
                    if row["psnr"] > max(r["psnr"] for r in log):
                        best = moved
                    log = log + [row]
                done = (moved, step + 1, log, best, kept)
                start, step = moved, step + 1
                if row is not None:
                    state.save(start, step, log, best, settings, fingerprints, kept)
                if progress:
                    progress(step, options.outer_steps, row)
        except Interrupted as exc:
            signals.ignore()  # a second Ctrl-C must not cut the checkpoint short
            start, step, log, best, kept = done
            if step:
                state.save(start, step, log, best, settings, fingerprints, kept)
            raise MetaInterrupted(exc.signum, step, state.path) from None
        except InnerFitsDiverged as exc:
            start, step, log, best, kept = done
            if step:
                state.save(start, step, log, best, settings, fingerprints, kept)
            learned = "the base" if options.modulations else "the start"
            kept_where = f"{learned} is checkpointed at outer step {step} in {state.path}" if step else \
                "nothing is kept"
            lower = "--outer-lr" if options.modulations else f"a smaller --lr (e.g. {config.optimizer.lr / 10:g}) or " \
                                                              f"--outer-lr"
            raise InnerFitsDiverged(f"the inner fits of outer step {step + 1}: {exc}; {kept_where}. Try {lower}") \
                from None
        finally:
            method.close()
    chosen_row = max(log, key=lambda r: r["psnr"])  # the first of equals: the start `best` holds
    if chosen_row["step"] == 0 and len(log) > 1:
        given = config.training.init if is_file_start(config.training.init) else None
        raise NothingLearned(log, options, state.path, given)
    if not np.isfinite(best).all():
        raise InrError(f"the start learned holds NaN or infinite values (outer step {chosen_row['step']}); nothing "
                       f"is written: try a smaller --lr or --outer-lr")
    try:
        method.write(best, out, {"images": len(training), **options.recorded(), "outer_step": int(chosen_row["step"])})
        chart(log, options.inner_steps, state.chart)
    except OSError as exc:
        raise InrError(f"{exc}; the learning is checkpointed in {state.path}: run the same command again once it "
                       f"can be written") from None
    return {"log": log, "images": len(training), "heldout": len(heldout), "spec": spec,
            "best_step": int(chosen_row["step"]), "where": method.where}


class NothingLearned(InrError):
    """No outer step measured better than the first start: writing that start would call a failed
    learning done (an outer rate too large for the network makes every step worse)."""

    def __init__(self, log: list[dict], options: MetaOptions, checkpoint: Path, given: str | None = None):
        learned = "base" if options.modulations else "start"
        smaller = f"--outer-lr (this run's {options.outer_lr:g})" + ("" if options.modulations else " or --lr")
        after = max(row["psnr"] for row in log[1:])
        # a file --init may be learned already: its own measure is then the best these settings reach
        learned_already = "" if given is None else f"; or the {learned} --init {given} gives is already as good " \
            f"as this learning makes it, and it is the one to use"
        super().__init__(
            f"no outer step improved on the first {learned}: the held-out PSNR after {options.inner_steps} inner "
            f"steps was {log[0]['psnr']:.2f} dB at outer step 0 and at most {after:.2f} dB after it; nothing is "
            f"written. A smaller {smaller} is the usual cure: run again with it and --force ({checkpoint} holds "
            f"this run's learning){learned_already}")


def chart(log: list[dict], inner_steps: int, path: Path) -> None:
    from inr_cli.runs.pictures import psnr_svg

    text = psnr_svg(log)
    if text:
        atomic_write_text(path, text.replace("PSNR of the training image", f"Held-out PSNR after {inner_steps} "
                                             f"inner steps"))


def read_log(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]
