"""`inr fit-many`: one network per image of a folder (or a list, or a bucket), fitted in packs
through the core's networks dimension. The driver lists the inputs, plans (plan.py), has the
shards fitted by a Runner, in this process (InProcess, here) or on a Ray cluster (cluster.OnRay),
and assembles the set (storage.py).

Running the same command again lists the inputs, compares them with the plan and fits only the
shards that are missing, so a killed run loses at most the shards in flight.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Protocol

import numpy as np

from inr_cli.config import KEY_TYPES, SET_PRESETS, Config, build_config, flags_to_values, given_keys, with_values
from inr_cli.console import info, notice
from inr_cli.core.memory import check_training
from inr_cli.core.network import NetworkSpec
from inr_cli.core.sizing import AUTO, SIZED_KEYS, fit_to_image
from inr_cli.core.training_loop import Interrupted, Signals
from inr_cli.errors import InrError, UsageError
from inr_cli.formats.network_set import (
    BASE,
    INDEX,
    PLAN,
    SHARDS,
    WEIGHTS,
    refuse_damaged_files,
)
from inr_cli.formats.start import is_file_start, resolved_start, start_file, start_network, start_params, start_sha256
from inr_cli.hooks import hook
from inr_cli.limits import MAX_HEADER_BYTES, MAX_LIST_BYTES
from inr_cli.outputs import IGNORED, folder_output, refuse_dangling, refuse_inputs_among, refuse_inside
from inr_cli.sets import inputs
from inr_cli.sets.cluster import OnRay
from inr_cli.sets.grow import grow
from inr_cli.sets.labels import read_labels, relabelled
from inr_cli.sets.latents import base_of, latent_settings, plan_base
from inr_cli.sets.output_kind import output_storage
from inr_cli.sets.packs import PackInterrupted, default_pack, fit_shard, shard_images
from inr_cli.sets.partial import remove_partials
from inr_cli.sets.plan import BadPlan, ImageEntry, Plan, entries_from_probe, make_plan
from inr_cli.sets.set_folder import SetFolder
from inr_cli.sets.storage import (
    SET_FILES,
    DamagedShard,
    assemble,
    check_shard,
    clear_set,
    rows_file_ready,
    shard_name,
    write_shard,
)
from inr_cli.settings import FIT_MANY, FIT_MANY_FREE_KEYS

RAY_ADDRESS = re.compile(r"local|auto|(ray://)?[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}")  # what ray.init takes


class SizeNote(str):
    """A note on a setting chosen for the images' size (omega0 ...): information, which quiet hides;
    the other notes (files skipped, networks fitted again) are said even then."""


def check_options(pack: int | None, ray: str | None, workers: int | None, gpus_per_worker: float | None) -> None:
    """fit-many's own options (--pack, --workers, --gpus-per-worker), as the command and the API take
    them; the settings are checked where the configuration is built."""
    if ray is not None and not RAY_ADDRESS.fullmatch(ray):
        raise UsageError(f"--ray {ray!r:.60}: not an address of a Ray cluster (local, auto, ray://host:port or "
                         f"host:port)")
    if pack is not None and pack <= 0:
        raise UsageError(f"--pack must be a positive number of networks, got {pack}")
    if workers is not None and workers <= 0:
        raise UsageError(f"--workers must be positive, got {workers}")
    if gpus_per_worker is not None and gpus_per_worker <= 0:
        raise UsageError(f"--gpus-per-worker must be a positive share of a GPU, got {gpus_per_worker:g}")
    if gpus_per_worker is not None and not (gpus_per_worker <= 1 or float(gpus_per_worker).is_integer()):
        raise UsageError(f"--gpus-per-worker must be a share of one GPU (0 < F <= 1) or a whole number, "
                         f"got {gpus_per_worker:g}")
    if gpus_per_worker is not None and not ray:
        raise UsageError("--gpus-per-worker places Ray workers: it needs --ray")
    if workers is not None and not ray:
        raise UsageError("--workers places Ray workers: it needs --ray")


def fit_folder(source: str, out: str, flags: dict, config_file: Path | None, preset: str | None, pack: int | None,
               ray: str | None, workers: int | None, gpus_per_worker: float | None, skip_unreadable: bool,
               quiet: bool, force: bool = False, add: bool = False, labels: Path | None = None) -> Plan:
    """`inr fit-many INPUT -o OUT` (flags: {flag name: value}), for the command and the API's fit_many."""
    check_options(pack, ray, workers, gpus_per_worker)
    if not inputs.is_url(source):
        source = str(Path(source).resolve())
    if not inputs.is_url(out):
        refuse_dangling(Path(out))  # before resolving, which would follow it
        out = str(Path(out).resolve())
    # A set's weights are float32 (weights.npy): a byte budget sizes its networks as such.
    values = flags_to_values({**flags, "preview_every": 0, "dtype": "float32", "source": source})
    config = resolved_start(build_config(config_file, values, preset, SET_PRESETS, command=FIT_MANY,
                                           start=start_network(values, preset, config_file, SET_PRESETS)))
    given = given_keys(config_file, values, preset)
    base = base_of(config.training.init)
    if base is not None:  # a set of latents: the base says the network and the steps
        config = latent_settings(config, base, given, {key for key, value in values.items() if value is not None})
        given = given | set(base.spec.settings())
    if add:  # the new images apart, with the set's own settings (checked as a rerun's), then joined
        def fit_new(scratch: Path, names: set[str]) -> None:
            saved = Plan.read(Path(out) / PLAN)
            if labels is not None:
                _refuse_relabelling(Path(out), saved, read_labels(labels), labels)
            own = settings_on_rerun(config, saved.config, given)
            _refuse_changed_settings(SetFolder(out), saved, Plan(saved.folder, own, saved.spec, [], [], saved.pack,
                                                                 start_sha256=start_sha256(own.training.init)))
            fit_set(source, str(scratch), own, pack or saved.pack, ray, workers, gpus_per_worker, skip_unreadable,
                    quiet, only=names, labels=labels, grown=saved)

        grow(source, Path(out), fit_new)
        return Plan.read(Path(out) / PLAN)
    return fit_set(source, out, config, pack, ray, workers, gpus_per_worker, skip_unreadable, quiet, force,
                   labels=labels, given=given)


def settings_on_rerun(config: Config, saved: Config | dict, given: set[str] | None) -> Config:
    """This command's configuration on what it resumes or grows, started with the settings `saved` (a
    Config, or {key: value} of those it recorded): a setting the command did not give (`given`; None:
    it gave every one) is the saved one, whatever this inr's defaults and presets choose now, and so
    is a setting it left to the size (an older inr may have sized it otherwise); one it gave stays,
    to be checked against the saved one. What may change on a rerun (the device...) stays this
    command's."""
    if isinstance(saved, Config):
        saved = {key: saved.get(key) for key in KEY_TYPES}
    taken = {key: value for key, value in saved.items() if key not in FIT_MANY_FREE_KEYS
             and ((given is not None and key not in given) or (key in SIZED_KEYS and config.get(key) == AUTO))}
    return with_values(config, taken)


def _refuse_relabelling(out: Path, saved: Plan, labels: dict[str, str], where: Path) -> None:
    """--add keeps the networks and labels of the images the set holds: a label file that says
    otherwise for one of them is refused, not dropped."""
    for entry in saved.images:
        if entry.name in labels and labels[entry.name] != entry.label:
            raise InrError(f"{where} labels {entry.name} {labels[entry.name]!r}, the set in {out} holds it as "
                           f"{entry.label!r}; --add keeps the set's labels: make them agree, or fit a new set")


class Runner(Protocol):
    """Where the shards are fitted: InProcess (below) or cluster.OnRay."""

    where: str  # for the line that starts the fitting

    def probe(self, listed: list[inputs.Listed], config: Config) -> list[tuple]:
        """inputs.probe of every listed image, run where the images are read."""

    def pack_for(self, spec: NetworkSpec, config: Config, width: int, height: int) -> int:
        """The images per shard when --pack is not given."""

    def machines(self, config: Config) -> int:
        """How many machines the shards may be fitted on (output_kind: rows in place or whole shards)."""

    def fit(self, plan: Plan, folder: SetFolder, pending: list[int], on_shard, signals: Signals, progress) -> None:
        """Fit and write the shards `pending`, calling on_shard(index, result) after each and
        telling `progress` (progress.ImageProgress) what it can of the steps; a signal (signals)
        ends it as Interrupted (PackInterrupted when the pack in flight was saved)."""

    def assemble(self, folder: SetFolder, plan: Plan, networks: bool) -> tuple[int, str]:
        """storage.assemble of the finished shards (their networks too, `networks`), where the
        set's bytes need not cross this machine's network; the bytes per image, and where it ran
        ("": here)."""


class InProcess:
    """Every shard fitted here, one after another, each as one pack on this process's backend; the
    pack in flight is saved in the set folder when interrupted and at the clock interval."""

    def __init__(self, config: Config, quiet: bool):
        from inr_cli.backends import kernel_options, make_backend

        self.backend = make_backend(config.training.device, quiet=quiet, **kernel_options(config.training))
        self.where = self.backend.name

    def probe(self, listed: list[inputs.Listed], config: Config) -> list[tuple]:
        return inputs.probe([(item.name, item.location) for item in listed], config)

    def pack_for(self, spec: NetworkSpec, config: Config, width: int, height: int) -> int:
        return default_pack(self.backend, spec, config, width, height)

    def machines(self, config: Config) -> int:
        return 1

    def assemble(self, folder: SetFolder, plan: Plan, networks: bool) -> tuple[int, str]:
        return assemble(folder, plan, networks), ""

    def fit(self, plan: Plan, folder: SetFolder, pending: list[int], on_shard, signals: Signals, progress) -> None:
        for index in pending:
            names = plan.shards[index]
            result = fit_shard(self.backend, plan, shard_images(plan, index), names, signals, progress=progress,
                               saved_in=folder, shard=index)
            write_shard(folder, index, result, [plan.row_of[name] for name in names])
            remove_partials(folder, [index])
            on_shard(index, result)
            hook("shard-written", shards=folder.join(SHARDS))


def fit_set(source: str, out: str | Path, config: Config, pack: int | None = None, ray: str | None = None,
            workers: int | None = None, gpus_per_worker: float | None = None, skip_unreadable: bool = False,
            quiet: bool = False, force: bool = False, only: set[str] | None = None,
            labels: Path | None = None, grown: Plan | None = None, given: set[str] | None = None) -> Plan:
    """`inr fit-many` after its options are read and checked (fit_folder): plan (or resume), fit every
    pending shard in-process or on a Ray cluster, assemble the set in `out`. Progress and notices on
    stderr unless quiet. `given`: the keys the command gave (given_keys; None: every key of `config`),
    the others are a resumed set's own."""
    from inr_cli.progress import ImageProgress

    notices: list[str] = []
    folder = SetFolder(out)
    runner: Runner = OnRay(ray, workers, gpus_per_worker) if ray else InProcess(config, quiet)
    whole_shards = None
    if folder.local:
        whole_shards, folder.front_to_back = output_storage(folder.local, runner.machines(config))
        folder.rows_in_place = not whole_shards
    plan, pending = prepare(source, folder, config, pack, skip_unreadable, notices, runner, force, only, labels,
                            grown, given)
    if whole_shards and pending:
        notices.append(f"{whole_shards}: each shard's file holds its networks, and the driver streams them into "
                       f"{WEIGHTS} at the end")
    for message in notices:
        if not (quiet and isinstance(message, SizeNote)):
            notice(message)
    remove_partials(folder, set(range(len(plan.shards))) - set(pending))  # left by a run killed as it wrote its shard
    total = len(plan.images)
    done = total - sum(len(plan.shards[i]) for i in pending)
    if not quiet:
        largest = max(len(shard) for shard in plan.shards)  # the images a shard holds, not what it could
        shards = "1 shard" if len(plan.shards) == 1 else f"{len(plan.shards)} shards of up to {largest}"
        network = f"{plan.spec.model} {plan.spec.layers}x{plan.spec.hidden}"
        what = f"latents of {plan.latent} over a base {network}" if plan.latent else network
        info(f"fitting {total} images ({shards}; {done} done) on {runner.where}: {what}, "
             f"{plan.config.training.steps} steps -> {out}")
    steps, target = plan.config.training.steps, plan.config.training.target_psnr
    reached = [0, 0]  # with --until-psnr: of the images fitted now, those that reached it, and all
    with Signals() as signals, ImageProgress(total, done, steps, quiet) as progress:
        def on_shard(index, result):
            progress.add(len(result["names"]), result["psnr"])
            if target:  # stopped before the last step, or at it with the target met
                met = (np.asarray(result["steps"]) < steps) | (np.asarray(result["psnr"]) >= target)
                reached[0], reached[1] = reached[0] + int(met.sum()), reached[1] + len(met)

        try:
            runner.fit(plan, folder, pending, on_shard, signals, progress)
        except Interrupted as exc:
            signals.ignore()
            progress.stop()
            info(interrupted_message(exc, plan, steps, folder))
            raise SystemExit(128 + exc.signum) from None
    # A finished set of whole shards run again keeps its weights.npy (made whole before index.csv
    # is written), not made again from every shard; rows in place cost nothing to go over.
    networks = bool(pending) or folder.rows_in_place or not folder.exists(WEIGHTS)
    bytes_per_image, where = runner.assemble(folder, plan, networks)
    if not quiet:
        what = (f"latents of {plan.latent:,} numbers over a base of {plan.spec.parameter_count():,} parameters"
                if plan.latent else f"networks of {plan.spec.parameter_count():,} parameters")
        info(f"done: {total} {what} ({bytes_per_image:,} bytes each) in {folder.join(WEIGHTS)}" +
             (f" (assembled on {where})" if where else "") +
             f"; one row per image in {folder.join(INDEX)}")
        if reached[1]:  # a target most images miss is said, not left to index.csv's steps column
            info(f"--until-psnr {target:g}: {reached[0]} of the {reached[1]} images fitted now reached it within "
                 f"{steps} steps" + ("" if reached[0] == reached[1] else
                                     "; the others stopped there (--steps takes more)"))
    return plan


def interrupted_message(exc: Interrupted, plan: Plan, steps: int, folder: SetFolder) -> str:
    """What a signal left, as found on disk (a signal may land between a shard's write and its
    count): the images fitted, the pack saved in flight, and how to go on."""
    written = set(folder.files(SHARDS))
    done = sum(len(names) for i, names in enumerate(plan.shards) if shard_name(i).rpartition("/")[2] in written)
    total = len(plan.images)
    kept = f"{done} of {total} images are fitted and kept in {folder}" if done else \
        f"none of the {total} images is fitted yet"
    if isinstance(exc, PackInterrupted):
        kept += f"; the pack in flight is saved at step {exc.step} of {steps} in {exc.saved}"
    return f"{exc}: {kept}; run the same command again to go on"


def prepare(source: str, folder: SetFolder, config: Config, pack: int | None, skip_unreadable: bool,
            notices: list, runner: Runner, force: bool = False, only: set[str] | None = None,
            labels: Path | None = None, grown: Plan | None = None,
            given: set[str] | None = None) -> tuple[Plan, list[int]]:
    """The plan (new, or the one in the output checked against this command) and the shards still
    to fit. The runner probes the images (their size and fingerprint, learned where they are read)
    and says the shard size when --pack is not given. Every check is made before the output is
    touched: only then are its files written, renamed or removed (--force: a new set replaces
    whatever set or set files were there)."""
    _refuse_output_in_input(source, folder)
    saved = _saved_plan(folder, force, notices)
    listed = inputs.list_inputs(source)
    if only is not None:  # --add: the images the set does not hold yet
        listed = [item for item in listed if item.name in only]
    if labels is not None:  # --labels: a CSV's labels replace the class folders'
        listed = relabelled(listed, read_labels(labels), labels)
    _refuse_writing_over_inputs(folder, listed)
    if saved is not None:
        try:
            config = _resumed_config(folder, saved, listed, config, pack, given)
        except InrError as exc:
            if not force:
                raise
            notices.append(f"--force: {folder} is started again ({str(exc).split(';')[0]})")
            saved = None
    if saved is not None:
        plan = saved
        plan.config = config  # the free keys (device, ...) may differ; the rest was just checked
        located = {item.name: item.location for item in listed}
        for entry in plan.images:  # read where this command's input says, never where a plan file says
            entry.location = located[entry.name]
        pending, with_networks, damaged, leftovers = _shards_to_fit(folder, plan)
        for index, why in damaged.items():
            notices.append(f"{folder.join(shard_name(index))} is damaged ({why}); its images are fitted again")
            folder.remove(shard_name(index))
        for name in leftovers:  # writes killed before their rename
            folder.remove(f"{SHARDS}/{name}")
        folder.make_folder(SHARDS)
    else:
        entries, skipped = entries_from_probe(listed, runner.probe(listed, config), config, skip_unreadable)
        notices += kept_at_their_size(entries, config.data.size)
        config, reasons = fit_to_image(config, max(e.width for e in entries), max(e.height for e in entries),
                                       len(entries[0].channels))
        notices += map(SizeNote, reasons)
        if pack is None:
            first = entries[0]
            spec = NetworkSpec.from_config(config, len(first.channels))
            pack = runner.pack_for(spec, config, first.width, first.height)
        plan = make_plan(source, config, entries, pack, skipped)
        if grown is not None:  # --add: the set's own start, whatever this inr would choose
            plan.output_start = grown.output_start
        if is_file_start(plan.config.training.init):  # its network checked before the folder is touched
            start_params(plan.config.training.init, plan.spec)
            base = base_of(plan.config.training.init)
            plan.latent = 0 if base is None else base.latent
        backend = getattr(runner, "backend", None)  # a Ray cluster's workers check their own machines
        if backend is not None:  # the largest pack, before the folder is touched
            check_training(plan.spec, plan.config, max(e.width for e in entries), max(e.height for e in entries),
                           min(plan.pack, len(entries)), backend, images_held=False,
                           doing=f"a pack of {min(plan.pack, len(entries))} networks (--pack)")
        if force:
            clear_set(folder)
        folder.make_folder(SHARDS)
        folder.write_bytes(PLAN, plan.to_json().encode())
        pending, with_networks = list(range(len(plan.shards))), set()
    for name, why in plan.skipped:
        notices.append(f"skipped {name}: {why}")
    if plan.latent:
        _base_in_set(folder, plan, notices)
    if folder.local:
        pending = rows_file_ready(folder.local, plan, pending, with_networks, notices, folder.rows_in_place)
    return plan, pending


def _base_in_set(folder: SetFolder, plan: Plan, notices: list) -> None:
    """The base the latents are drawn through, in the set: copied from --init where it is missing or
    is not the file the set was planned with (a damaged copy is copied again, as a damaged shard is
    fitted again, never left for every reader of the set to refuse)."""
    if folder.exists(BASE):
        # a base of the plan's network and latent size is its float32 tensors and a header: a copy
        # larger than that, or one that cannot be read (a folder, a FIFO), is no copy of it
        spec = plan.spec
        largest = 4 * (spec.parameter_count() + (spec.layers * spec.hidden + 1) * plan.latent) + 8 + MAX_HEADER_BYTES
        try:
            held = hashlib.sha256(folder.read_bytes(BASE, largest)).hexdigest()
        except InrError:
            held = None
        if held is not None and (not plan.start_sha256 or held == plan.start_sha256):
            return
        notices.append(f"{folder.join(BASE)} is not the base this set was started from (damaged or replaced); it "
                       f"is copied again from --init")
    plan_base(plan)  # the file it was planned with
    folder.write_bytes(BASE, start_file(plan.config.training.init).read_bytes())


def kept_at_their_size(entries: list[ImageEntry], size: int) -> list[str]:
    """One line for the images smaller than --size: a set's --size shrinks the larger ones and leaves
    these as they are (an enlarged image would be scored against its own upscale, and counted at its
    upscale's bytes)."""
    smaller = [entry for entry in entries if max(entry.width, entry.height) < size]
    if not smaller:
        return []
    least = min(smaller, key=lambda entry: max(entry.width, entry.height))
    return [f"{len(smaller)} of {len(entries)} images are smaller than --size {size} (the smallest: {least.name}, "
            f"{least.width}x{least.height}): each is fitted at its own size; --size only shrinks a set's images"]


def _refuse_output_in_input(source: str, folder: SetFolder) -> None:
    """A set inside its input folder would be listed as its own images when the command is run again."""
    if folder.local is not None:
        refuse_inside(folder.local, [source])
    elif inputs.is_url(source):
        out, root = str(folder).rstrip("/"), source.rstrip("/")
        if out == root or out.startswith(root + "/"):
            where = "the input folder" if out == root else f"inside the input folder {source}"
            raise UsageError(f"-o {folder} is {where}: its files would be read as inputs the next time; choose an "
                             f"-o outside it")


def _refuse_writing_over_inputs(folder: SetFolder, listed: list[inputs.Listed]) -> None:
    """A set's file that is also one of its inputs (a list file may name anything, a link or a hard
    link reach anything) is never written, even with --force."""
    if folder.local is None:
        return
    own = [folder.local / name for name in SET_FILES]
    if (folder.local / SHARDS).is_dir():
        own += list((folder.local / SHARDS).iterdir())
    refuse_inputs_among(own, [item.location for item in listed if not inputs.is_url(item.location)])


def _saved_plan(folder: SetFolder, force: bool, notices: list) -> Plan | None:
    """The output's plan, checked whole; None for a new set. A local folder follows the one folder
    rule (outputs.folder_output): new, empty, or a set (its plan; a folder holding only the empty
    shards/ a run killed at its start leaves, too); files but no set there are refused, as an
    existing file is by the other commands, unless --force. A bucket is looked at the same way."""
    if folder.local is not None:
        shards = folder.local / SHARDS
        if os.path.lexists(shards) and (os.path.islink(shards) or not shards.is_dir()):
            raise UsageError(f"{shards} is not a folder of inr's; inr never replaces it: choose another -o")
        refuse_damaged_files(folder.local)
        if not folder_output(folder.local, _holds_set, "inr fit-many set", force=force, writes=SET_FILES):
            return None
        if not folder.exists(PLAN):
            return None  # the empty shards/ of a run killed at its start
    elif not folder.exists(PLAN):
        others = [name for name in folder.listing() if not (name == SHARDS and _empty_shards_folder(folder))
                  and name not in IGNORED]
        if others and not force:
            shown = ", ".join(sorted(others)[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            raise UsageError(f"{folder} is not empty ({shown}) and holds no inr fit-many set: choose another -o "
                             f"(--force writes the set beside them)")
        return None
    try:
        return Plan.from_json(folder.read_bytes(PLAN, MAX_LIST_BYTES).decode(), folder.join(PLAN))
    except (BadPlan, UnicodeDecodeError) as exc:
        if not force:
            raise InrError(f"{folder.join(PLAN)}: not a plan this inr can read ({exc}); --force starts a new "
                           f"set in {folder}") from None
        notices.append(f"--force: {folder} is started again ({folder.join(PLAN)} was not a plan this inr "
                       f"can read)")
        return None


def _holds_set(folder: Path) -> bool:
    """A set's folder, to go on with: its plan, or only the empty shards/ a new set makes first."""
    if os.path.lexists(folder / PLAN):
        return True
    try:
        return set(os.listdir(folder)) - IGNORED == {SHARDS} and not os.listdir(folder / SHARDS)
    except OSError:
        return False


def _empty_shards_folder(folder: SetFolder) -> bool:
    """A new set makes shards/ first: an empty one is what a run killed at its start leaves."""
    if folder.local:
        return not os.listdir(folder.local / SHARDS)
    return not folder.files(SHARDS)


def _resumed_config(folder: SetFolder, saved: Plan, listed: list[inputs.Listed], config: Config,
                    pack: int | None, given: set[str] | None) -> Config:
    """This command's configuration for the saved plan: refused where it or the inputs changed."""
    _refuse_changed_inputs(folder, saved, listed)
    config = settings_on_rerun(config, saved.config, given)
    labelled = {item.name: item.label for item in listed}
    relabelled_entry = next((e for e in saved.images if labelled.get(e.name, e.label) != e.label), None)
    if relabelled_entry is not None:  # index.csv would say otherwise than the set's plan
        raise InrError(f"{folder}: {relabelled_entry.name} is labelled {labelled[relabelled_entry.name]!r} now, "
                       f"{relabelled_entry.label!r} in this set; rerun with the same labels, or use another -o "
                       f"(--force starts it again)")
    wanted = Plan(saved.folder, config, saved.spec, [], [], pack or saved.pack,
                  start_sha256=start_sha256(config.training.init))
    _refuse_changed_settings(folder, saved, wanted)
    return config


def _shards_to_fit(folder: SetFolder, plan: Plan) -> tuple[list[int], set[int], dict[int, str], list[str]]:
    """The shards without a file, those whose file holds their networks, the damaged ones (to fit
    again) and the leftovers of killed writes, each file checked against the plan; nothing is
    removed here."""
    files = set(folder.files(SHARDS))
    leftovers = [name for name in files if name.startswith(".") and name.endswith(".tmp")]
    pending, with_networks, damaged = [], set(), {}
    for index in range(len(plan.shards)):
        if shard_name(index).rpartition("/")[2] not in files:
            pending.append(index)
            continue
        try:
            if check_shard(folder, index, plan):
                with_networks.add(index)
        except DamagedShard as exc:
            damaged[index] = str(exc)
            pending.append(index)
    return pending, with_networks, damaged, leftovers


def _refuse_changed_inputs(out: SetFolder, saved: Plan, listed: list[inputs.Listed]) -> None:
    planned = {e.name: e.bytes for e in saved.images}
    planned.update((name, -1) for name, _ in saved.skipped)
    now = {item.name: item.size for item in listed}
    if planned.keys() != now.keys():
        added, gone = sorted(now.keys() - planned.keys()), sorted(planned.keys() - now.keys())
        change = f"{added[0]} is new" if added else f"{gone[0]} is gone"
        grow = "; --add fits the new images into it" if added and not gone else ""
        raise InrError(f"{out} was started on other images ({change} since); use another -o{grow} (--force "
                       f"starts it again on these)")
    for name, size in planned.items():
        if size >= 0 and now[name] >= 0 and size != now[name]:
            raise InrError(f"{out} was started on other images ({name} changed since); use another -o (--force "
                           f"starts it again on these)")


def _refuse_changed_settings(out: SetFolder, saved: Plan, plan: Plan) -> None:
    old, new = saved.settings(), plan.settings()
    if old["pack"] != new["pack"]:
        raise UsageError(f"{out} was started with --pack {old['pack']}, not {new['pack']}; "
                         f"rerun without --pack or with --pack {old['pack']} (--force starts it again)")
    # The start first: a file start also records init_output_at_mean off (formats/start.py), and the
    # start is then what the user changed.
    for key in sorted(old["settings"], key=lambda key: key != "training.init"):
        value = old["settings"][key]
        if new["settings"].get(key) != value:
            raise UsageError(f"{out} was started with {key} = {value!r}, not {new['settings'].get(key)!r}; "
                             f"rerun with the same settings, or use another -o (--force starts it again)")
    if old.get("start_sha256") and old["start_sha256"] != new["start_sha256"]:
        raise InrError(f"{out} was started from another start (the file {saved.config.training.init} changed since); "
                       f"restore it, or use another -o")
