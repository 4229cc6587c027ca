"""How much memory a configuration needs, estimated before anything is allocated for it, and the one
check every command that trains or draws makes with it (`check`).

An estimate is the sum of named parts, each with the settings that drive it (as their flags and
TOML keys say them), so that a refusal names what to lower:

- the parameters, Adam's two moments and the gradients (and the copies a checkpoint takes);
- the batch's workspace: every layer's activations and gradients over the rows of a step (the whole
  image without --batch-size), the encoding's buffers, the mini-batch drawn each step;
- the image's copies for training (its targets and coordinates) and, where it is still to be read
  (a pack of fit-many), the images themselves;
- the render: the chunks of rows a drawing goes through and the canvas it fills.

Host and device are estimated apart: on the CPU backends everything is host memory; on the GPU the
training buffers are device memory (inr train's checkpoint snapshots too), checked against what the
device has free, and the host keeps the image (and a set's checkpoint copies). The process's own
memory (the interpreter, the libraries, what it has read so far) is read from the system where the
check is made, and added.

The model follows what the code allocates (core/trainer.py, core/workspace.py, core/render.py and
each backend's training pass); its constants were measured (BENCHMARKS.md, "Memory before
allocation": within 20% of the measured peak on the CPU for every preset at three sizes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from inr_cli.core.network import NetworkSpec
from inr_cli.core.render import CHUNK_PIXELS
from inr_cli.core.state import snapshot_count
from inr_cli.errors import InrError
from inr_cli.hooks import hook
from inr_cli.settings import BY_KEY

FLOAT = 4  # bytes of a float32, as every buffer of a training holds them
# A step of the reference (NumPy) backend makes whole-array temporaries, about this many of its
# widest activation (an activation's argument).
NUMPY_TEMPORARIES = 1
# The host copies of the parameters a set's pack keeps (inr train's checkpoints are snapshots:
# core/state.snapshot_count): its starting state and, at each checkpoint, the parameters and both
# moments taken off the trainer.
HOST_STATE_COPIES = 4
# Reading an image holds, beside the pixels it keeps, about this many bytes per channel value (the
# file's bytes, the decoder's).
DECODE_BYTES = 2
# Resizing an image (formats/images.resize, Lanczos) holds about this many bytes per channel value of
# the result: each channel resampled as floats, stacked, clipped and turned back into what is kept.
RESIZE_BYTES = 12
# Finishing a run draws the whole image (float32), makes its 8-bit copy, the encoder's copy of that
# and the compressed file: about this many bytes per channel value beside the float render.
FINISH_BYTES = 3


@dataclass
class Part:
    what: str
    bytes: int
    settings: tuple[str, ...] = ()  # the keys that drive it (spelled in messages)


@dataclass
class Estimate:
    """What a command will allocate in one place (`where`: "host memory" or "GPU memory"), part by
    part; `held`: what the process holds already there, read from the system."""

    where: str
    parts: list[Part] = field(default_factory=list)
    held: int = 0

    @property
    def needed(self) -> int:
        return sum(part.bytes for part in self.parts)

    @property
    def total(self) -> int:
        return self.held + self.needed

    def describe(self) -> str:
        """Its largest parts with their sizes, and what this process holds already."""
        shown = sorted((part for part in self.parts if part.bytes), key=lambda part: -part.bytes)
        said = ", ".join(f"{part.what} {_size(part.bytes)}" for part in shown[:3])
        return said + (f"; this process holds {_size(self.held)} already" if self.held else "")

    def drivers(self) -> list[str]:
        """The settings that drive its large parts (a tenth of it or more), the largest part's first."""
        keys: list[str] = []
        for part in sorted(self.parts, key=lambda part: -part.bytes):
            if part.bytes >= self.needed / 10:
                keys += [key for key in part.settings if key not in keys]
        return [BY_KEY[key].spelled for key in keys]


def _size(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if count >= scale / 10:
            return f"{count / scale:.1f} {unit}"
    return f"{count / 1e3:.0f} kB"


# --- what each part takes ------------------------------------------------------------------------

ENCODING_KEYS = {"fourier": ("encoding.features",),
                 "hashgrid": ("encoding.levels", "encoding.level_features", "encoding.log2_table_size",
                              "encoding.max_resolution")}
NETWORK_KEYS = ("network.hidden", "network.layers")
# Bytes per row and thread of a hash grid level's lookup as the CPU computes it (its corners' entries,
# weights and the temporaries between), beside the buffers the workspace keeps.
HASH_LOOKUP_BYTES = 100


def _parameter_keys(spec: NetworkSpec) -> tuple[str, ...]:
    """The settings that size the parameters, those of the larger share first (a hash grid's tables
    are most of its network's)."""
    encoding = ENCODING_KEYS.get(spec.encoding, ())
    return encoding + NETWORK_KEYS if spec.encoding_size() > spec.parameter_count() / 2 else NETWORK_KEYS + encoding


def _rows_keys(full_batch: bool) -> tuple[str, ...]:
    return ("data.size",) if full_batch else ("training.batch_size",)


def _activation_floats(spec: NetworkSpec) -> int:
    """Floats per row of a training workspace (core/workspace.py): every layer's z, its activation
    where that is not z itself, and its gradient; the encoding's buffers."""
    floats = 0
    for (out_f, _), activation in zip(spec.layer_shapes(), spec.activations()):
        floats += out_f * (2 if activation == "linear" else 3)
    if spec.encoding == "fourier":
        floats += 3 * (spec.encoded_features // 2)  # the projection, then its cos and sin
    elif spec.encoding == "hashgrid":
        # the encoding and its gradient; each level's four corners (an int32 entry, a float32 weight)
        floats += 2 * spec.encoded_features + 8 * spec.hash_levels
    return floats


def _widest(spec: NetworkSpec) -> int:
    return max(max(out_f, in_f) for out_f, in_f in spec.layer_shapes())


def _render_row_bytes(spec: NetworkSpec, threads: int) -> int:
    """Bytes per row of a render's chunk (core/render.py): its workspace (two hidden buffers, the
    output, the coordinates, the encoding's) and what the encoding computes on the way (the Fourier
    features' angle of the whole projection, a hash grid level's lookup on each thread)."""
    floats = 2 * spec.hidden + spec.out_features + 2
    extra = 0
    if spec.encoding == "fourier":
        floats += 3 * (spec.encoded_features // 2)
        extra = (spec.encoded_features // 2) * FLOAT
    elif spec.encoding == "hashgrid":
        floats += spec.encoded_features
        extra = threads * HASH_LOOKUP_BYTES
    return floats * FLOAT + extra


def _threads(backend) -> int:
    return max(1, getattr(backend, "threads", 1))


def _blocked(backend, spec: NetworkSpec, rows: int, networks: int) -> bool:
    """Whether the CPU engine runs this step on blocks (cpu_backend.training_pass: groups of networks,
    blocks of rows; a trained encoding's step runs whole)."""
    if not hasattr(backend, "step_blocks") or spec.encoding == "hashgrid":
        return False
    groups, row_blocks = backend.step_blocks(networks, rows, _widest(spec))
    return len(groups) > 1 or len(row_blocks) > 1


def _workspace(spec: NetworkSpec, rows: int, networks: int, backend) -> int:
    """Bytes of a training step's workspace (core/workspace.py, each backend's training pass)."""
    floats, name, threads = _activation_floats(spec), getattr(backend, "name", ""), _threads(backend)
    if _blocked(backend, spec, rows, networks):
        # The engine's own blocks (cpu_backend.BlockedPass): a workspace and a thread's temporaries
        # per thread and block shape, and each row block's gradients, added in order at the end.
        groups, row_blocks = backend.step_blocks(networks, rows, _widest(spec))
        blocks = [(g, r) for r in range(len(row_blocks)) for g in range(len(groups))]
        shapes = {(slot, groups[g][1] - groups[g][0], row_blocks[r][1] - row_blocks[r][0])
                  for (g, r), slot in zip(blocks, backend.block_slots(len(blocks)))}
        workspaces = sum(count * block_rows for _, count, block_rows in shapes) * (floats + _widest(spec)) * FLOAT
        return workspaces + len(row_blocks) * networks * spec.parameter_count() * FLOAT
    workspace = networks * rows * floats * FLOAT
    if name == "numpy":  # whole-array temporaries
        workspace += NUMPY_TEMPORARIES * networks * rows * _widest(spec) * FLOAT
    elif name == "cpu":  # the derivative's temporaries; a hash grid level's lookups and scatter per thread
        workspace += networks * rows * _widest(spec) * FLOAT
        if spec.encoding == "hashgrid":
            workspace += threads * networks * rows * HASH_LOOKUP_BYTES
    return workspace


def training_estimates(spec: NetworkSpec, width: int, height: int, batch_size: int, networks: int, backend,
                       images_held: bool = True, previews: bool = True, value_bytes: int = 1,
                       snapshots: bool = False) -> list[Estimate]:
    """What training `networks` networks of `spec` on width x height images takes while it steps,
    on `backend` (its name: numpy, cpu or gpu): host memory and, on a GPU, device memory; with
    `previews`, one is drawn meanwhile. images_held: the images are read already (inr train); else
    (a pack of fit-many) they are counted too, `value_bytes` a channel value as they are stored (1
    for an 8-bit image, 4 for floats). snapshots: the checkpoints of inr train, snapshots where the
    trainer runs and streamed to the file (core/state.snapshot_count), not host copies."""
    from inr_cli.limits import picture_size, preview_factor

    on_gpu = getattr(backend, "name", "") == "gpu"
    pixels = width * height
    full_batch = batch_size == 0 or batch_size >= pixels
    rows = pixels if full_batch else batch_size
    channels, n, params = spec.out_features, networks, spec.parameter_count()
    device = Estimate("GPU memory") if on_gpu else None
    host = Estimate("host memory")
    training = device or host
    # The trainer's parameters, gradients and moments; the host copies a run keeps (its starting
    # state, a checkpoint's), which the GPU's host has too.
    training.parts.append(Part("the parameters, gradients and Adam's moments", 4 * n * params * FLOAT,
                               _parameter_keys(spec)))
    if snapshots:
        count = snapshot_count(n * params, getattr(backend, "in_host_memory", not on_gpu))
        training.parts.append(Part("their snapshots for checkpoints", count * 3 * n * params * FLOAT,
                                   _parameter_keys(spec)))
    else:
        host.parts.append(Part("their copies for checkpoints", HOST_STATE_COPIES * n * params * FLOAT,
                               _parameter_keys(spec)))
    workspace = _workspace(spec, rows, n, backend)
    if not full_batch:
        workspace += n * rows * (spec.in_features + channels) * FLOAT  # the batch drawn each step
    training.parts.append(Part("the batch's workspace", workspace,
                               _rows_keys(full_batch) + NETWORK_KEYS + ENCODING_KEYS.get(spec.encoding, ())))
    # The images' copies for training (core/trainer.py): a full batch's float targets and its one
    # table of coordinates, made on the host and copied where the trainer runs; mini-batches read
    # the pixels as stored (one image's in place on the CPU).
    if full_batch:
        copies = (n * pixels * channels + pixels * 2) * FLOAT
    else:
        copies = n * pixels * channels * value_bytes if n > 1 or on_gpu else 0
    training.parts.append(Part("the images' copies for training", copies, ("data.size",)))
    if on_gpu and full_batch:
        host.parts.append(Part("the images' staging copies", copies, ("data.size",)))
    if not images_held:
        host.parts.append(Part("the images", n * pixels * channels * (value_bytes + DECODE_BYTES), ("data.size",)))
    if previews:  # drawn meanwhile, every k-th pixel: a chunk's workspace and the canvas
        shown = picture_size(width, height, preview_factor(width, height))
        shown = shown[0] * shown[1]
        chunk = min(shown, CHUNK_PIXELS) * _render_row_bytes(spec, _threads(backend))
        training.parts.append(Part("the render's chunks", chunk, NETWORK_KEYS))
        host.parts.append(Part("the preview", shown * channels * (FLOAT + FINISH_BYTES), ()))
    return [estimate for estimate in (host, device) if estimate is not None]


def finishing_estimate(spec: NetworkSpec, width: int, height: int, networks: int, backend,
                       snapshots: bool = False) -> Estimate:
    """What a run holds once its training buffers are let go, drawing the image (every k-th pixel of
    a large one) and writing its pictures: the float render and its encodings, a chunk, the image's
    floats to score a render drawn whole, the parameters and the last checkpoint's copies (none with
    snapshots: inr train writes it from the trainer's own arrays)."""
    from inr_cli.limits import picture_size, shrink_factor

    pixels, channels = width * height, spec.out_features
    shown = picture_size(width, height)[0] * picture_size(width, height)[1]
    host = Estimate("host memory")
    whole = shrink_factor(width, height) == 1
    host.parts.append(Part("the final render", networks * shown * channels * (FLOAT + FINISH_BYTES)
                           + (networks * pixels * channels * FLOAT if whole else 0), ("data.size",)))
    host.parts.append(Part("the render's chunks", min(networks * shown, CHUNK_PIXELS) * _render_row_bytes(
        spec, _threads(backend)), NETWORK_KEYS))
    copies = 1 if snapshots else 1 + HOST_STATE_COPIES
    host.parts.append(Part("the parameters", copies * networks * spec.parameter_count() * FLOAT, _parameter_keys(spec)))
    return host


def render_estimates(spec: NetworkSpec, width: int, height: int, backend, depth: int = 8) -> list[Estimate]:
    """What drawing one network on a width x height canvas takes (core/render.py): a chunk's
    workspace on the backend, the canvas on the host (depth bits per channel; floats for the chunks)."""
    pixels, channels = width * height, spec.out_features
    chunk = Part("the render's chunks", min(pixels, CHUNK_PIXELS) * _render_row_bytes(spec, _threads(backend)),
                 NETWORK_KEYS)
    canvas = Part("the canvas", pixels * channels * (depth // 8 + FINISH_BYTES), ())
    if getattr(backend, "name", "") == "gpu":
        return [Estimate("host memory", [canvas]), Estimate("GPU memory", [chunk])]
    return [Estimate("host memory", [chunk, canvas])]


def reading_estimate(width: int, height: int, channels: int, value_bytes: int,
                     resized: tuple[int, int] | None = None) -> Estimate:
    """What reading a width x height image of `channels` values a pixel holds (formats/images.py):
    its pixels as kept (value_bytes a value) and, the larger of the two, the decoder's own or, when
    it is resized (`resized`: the new width and height), the float copy Lanczos works from and its
    results."""
    values = width * height * channels
    host = Estimate("host memory", [Part("the image", values * value_bytes)])
    decoding = Part("its decoding", values * DECODE_BYTES)
    if resized is not None:
        floats = (values + width * height) * FLOAT  # the float copy, one channel's image for Pillow
        resizing = Part(f"its resize to {resized[0]}x{resized[1]}",
                        floats + resized[0] * resized[1] * channels * RESIZE_BYTES)
        decoding = max(decoding, resizing, key=lambda part: part.bytes)
    host.parts.append(decoding)
    return host


# Bytes a byte of CSV text takes as the Python strings of its lines, parsed a block at a time
CSV_TEXT_BYTES = 8


def csv_reading_estimate(size: int, rows: int, columns: int, block: int) -> Estimate:
    """What reading a pixel CSV of `size` bytes, `rows` rows of `columns` numbers, holds at once
    (formats/pixel_csv.py): its bytes, a `block` of them as Python strings where its lines are parsed
    one by one, its table of float64 and each row's line number (twice, where the blocks' tables are
    joined), and the image made from it with the pixels' order."""
    return Estimate("host memory", [Part("the CSV's bytes", size),
                                    Part("a block of its lines", min(block, size) * CSV_TEXT_BYTES),
                                    Part("its table", rows * (columns + 1) * 2 * 8),
                                    Part("the image", rows * ((columns - 2) * FLOAT + 4 * 8))])


# --- what the machine has ------------------------------------------------------------------------

def _kilobytes_field(path: str, field_name: str) -> int | None:
    """Bytes of a "Name:  N kB" line of a /proc file (/proc/meminfo, /proc/self/status), or None."""
    try:
        with open(path, encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _meminfo(field_name: str) -> int | None:
    return _kilobytes_field("/proc/meminfo", field_name)


def _cgroup_room() -> int | None:
    """What a cgroup (v2) limit leaves this process's group: a container's memory cap."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as handle:
            path = next((line.strip().split(":", 2)[2] for line in handle if line.startswith("0::")), None)
        if path is None:
            return None
        folder = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(folder, "memory.max"), encoding="ascii") as handle:
            limit = handle.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(folder, "memory.current"), encoding="ascii") as handle:
            return int(limit) - int(handle.read().strip())
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def _address_space_room() -> int | None:
    """What an address-space limit (`ulimit -v`, RLIMIT_AS) leaves this process: the limit less what
    it maps already; None without one."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    mapped = _kilobytes_field("/proc/self/status", "VmSize")
    return None if limit == resource.RLIM_INFINITY or mapped is None else limit - mapped


def process_memory() -> int:
    """Bytes this process holds now (its resident set), 0 where the system does not say."""
    return _kilobytes_field("/proc/self/status", "VmRSS") or 0


def host_room() -> int | None:
    """Bytes of host memory this process may still take: what the system has available, within a
    container's limit and an address-space limit; None where none is known (the check is then skipped)."""
    found = [room for room in (_meminfo("MemAvailable"), _cgroup_room(), _address_space_room()) if room is not None]
    if not found:
        try:
            found = [os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
        except (ValueError, OSError, AttributeError):
            return None
    return min(found)


def _room(estimate: Estimate, backend) -> int | None:
    if estimate.where == "GPU memory":
        free = getattr(backend, "free_memory", None)
        return None if free is None else int(free())
    return host_room()


# --- the check -----------------------------------------------------------------------------------

def check(estimates: list[Estimate], backend, doing: str, advice: str = "") -> None:
    """Refuse, in one line naming the estimate and the settings that drive it, what would not fit:
    each estimate against the room its memory has (the host's available memory, a container's
    limit; the GPU's free memory). Nothing has been allocated for it yet."""
    for estimate in estimates:
        if estimate.where == "host memory":
            estimate.held = process_memory()
        hook("memory-estimate", estimate=estimate, doing=doing)
        room = _room(estimate, backend)
        if room is None:
            continue
        if estimate.needed > room:
            drivers = estimate.drivers()
            raise InrError(f"{doing} needs about {_size(estimate.needed)} more {estimate.where} and "
                           f"{_size(max(room, 0))} is free ({estimate.describe()}); "
                           f"{advice or 'lower ' + ', '.join(drivers) if drivers or advice else 'fit fewer at once'}")
        if estimate.needed > 0.8 * room:
            from inr_cli.console import notice  # the console (Rich) only where a notice is said

            notice(f"{doing} needs about {_size(estimate.needed)} of the {_size(room)} of {estimate.where} free: "
                   f"it may be slow or stopped if other programs need memory meanwhile")


def check_training(spec: NetworkSpec, config, width: int, height: int, networks: int, backend,
                   images_held: bool = True, doing: str = "this training", value_bytes: int = 1,
                   snapshots: bool = False) -> None:
    """The training check (training_estimates, finishing_estimate) for a configuration: before its
    parameters, workspace or images are allocated (value_bytes, snapshots: as training_estimates)."""
    batch = config.training.batch_size
    estimates = training_estimates(spec, width, height, batch, networks, backend, images_held,
                                   config.training.preview_every > 0, value_bytes, snapshots)
    finishing = finishing_estimate(spec, width, height, networks, backend, snapshots)
    host = estimates[0]
    if finishing.needed > host.needed:
        estimates[0] = finishing
    check(estimates, backend, doing)


def check_render(spec: NetworkSpec, width: int, height: int, backend, depth: int = 8) -> None:
    check(render_estimates(spec, width, height, backend, depth), backend, f"a {width}x{height} render",
          "draw a smaller canvas (--size, --width, --height)")
