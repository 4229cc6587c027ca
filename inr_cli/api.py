"""inr from Python: load trained networks, evaluate and draw them, fit new ones with the commands'
settings, and hand them to PyTorch or JAX.

    import inr_cli
    net = inr_cli.load("runs/photo")            # a run directory or checkpoint -> TrainedNetwork
    pixels = net.render(size=512)               # [H, W, C] uint8, the pixels `inr render` writes
    nets = inr_cli.load("photos-inr")           # an `inr fit-many` folder -> TrainedSet
    module = nets.to_torch()                    # [N, rows, 2] -> [N, rows, C], differentiable

Settings are keyword arguments named as the commands' flags without the dashes (steps=, hidden=,
fourier_sigma=, lr_min=...), or a dict of configuration keys (settings={"optimizer.beta2": 0.95}),
which also reaches the keys that have no flag. Bad input raises inr_cli.InrError (UsageError for a
bad setting) carrying the one-line message the command would print. Every argument is checked where
it comes in (arguments.py): a bad one is an InrError that is also the built-in error Python code
catches for it (TypeError, ValueError, IndexError for a row past the end, KeyError for a name). A
usage error raised deeper down, by a check the commands share (an unknown key, a setting's bound, a
file that is not a run), leaves the API as a ValueError too (_run_errors_for_python).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from inr_cli import arguments
from inr_cli.config import DEVICES, Spelling, given_settings
from inr_cli.core.memory import check_render
from inr_cli.core.network import NetworkSpec, frequency_view, layer_views
from inr_cli.errors import (
    OUT_OF_MEMORY,
    ArgumentTypeError,
    ArgumentValueError,
    FileError,
    InrError,
    OutOfMemory,
    UsageError,
    system_refusal,
)
from inr_cli.formats.atomic import atomic_path
from inr_cli.formats.checkpoint import FILENAME as CHECKPOINT
from inr_cli.formats.input_files import is_url
from inr_cli.formats.network_set import CHANNEL_SETS, LABEL, NetworkSet, is_network_set, load_network_set
from inr_cli.loading import is_exported_file, one_network
from inr_cli.outputs import IGNORED
from inr_cli.runs.directory import IMAGE_IN_RUN
from inr_cli.settings import FIT_MANY
from inr_cli.weights_data import WeightsView, label_codes

PathLike = str | Path
EVALUATION_DEVICE = "cpu"  # net(coords) takes and gives NumPy arrays: a GPU would only add copies


class _run_errors_for_python(contextlib.ContextDecorator):
    """What leaves the API, made what Python code catches (a decorator on every public function and,
    through _at_the_boundary, method). A usage error raised anywhere beneath, by a check the
    commands share (a setting's bound, a choice, a file that is not a run), is the ValueError a bad
    argument is; one already a built-in (arguments.py's) stays as it is. The commands end an
    interrupted run (its checkpoint or shards saved, what to do next said) with SystemExit(128 +
    signal); from Python that is a KeyboardInterrupt, which a notebook survives. NumPy's
    MemoryError is an InrError too (OutOfMemory, a MemoryError), with the command's words, and so is
    what the system refused that no reader named (a name too long: FileError, an OSError), in the
    one line the commands print for it."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if kind is SystemExit and isinstance(exc.code, int) and exc.code > 128:
            raise KeyboardInterrupt(f"interrupted (signal {exc.code - 128}); the work so far is saved") from None
        if kind is not None and issubclass(kind, MemoryError) and not issubclass(kind, InrError):
            raise OutOfMemory(OUT_OF_MEMORY) from None
        if kind is not None and issubclass(kind, OSError) and not issubclass(kind, InrError):
            raise FileError(system_refusal(exc), exc.errno, exc.strerror) from None
        if kind is not None and issubclass(kind, UsageError) and not issubclass(kind, PYTHON_ERRORS):
            raise ArgumentValueError(str(exc)) from None
        return False


# The built-in errors an argument's InrError is also (errors.py): one of them is kept as it is.
PYTHON_ERRORS = (TypeError, ValueError, LookupError, OSError)
# The methods a user calls besides the public ones
ENTRY_DUNDERS = ("__init__", "__call__", "__getitem__")


def _at_the_boundary(cls: type) -> type:
    """cls with each of its public methods (and __init__, __call__, __getitem__) under
    _run_errors_for_python, so that no method added later escapes it."""
    for name, member in list(vars(cls).items()):
        if inspect.isfunction(member) and (not name.startswith("_") or name in ENTRY_DUNDERS):
            setattr(cls, name, _run_errors_for_python()(member))
    return cls


@_at_the_boundary
class TrainedNetwork:
    """One trained network: its description (`spec`), its flat parameters (`params` [P] float32),
    the channels it draws (`channels`, e.g. ("r", "g", "b")), the size it was trained at and, for
    the network of a run, its run directory (`run_dir`: where `fit` wrote it; None in a set)."""

    def __init__(self, spec: NetworkSpec, params: np.ndarray, channels: Sequence[str], width: int, height: int,
                 run_dir: Path | None = None):
        if not isinstance(spec, NetworkSpec):
            raise ArgumentTypeError(f"spec is a NetworkSpec, got {type(spec).__name__}")
        self.spec = spec
        self.run_dir = arguments.optional_path(run_dir, "run_dir")
        self.params = arguments.float_array(params, "params", (spec.parameter_count(),))
        self.channels = tuple(arguments.names(channels, "channels"))
        if self.channels not in CHANNEL_SETS or len(self.channels) != spec.out_features:
            raise ArgumentValueError(f"channels {self.channels} are not l, r,g,b or r,g,b,a for "
                                     f"{spec.out_features} outputs")
        self.width, self.height = arguments.whole(width, "width", 1), arguments.whole(height, "height", 1)

    def __repr__(self) -> str:
        return (f"TrainedNetwork({self.spec.model} {self.spec.layers}x{self.spec.hidden}, encoding "
                f"{self.spec.encoding}, {self.spec.parameter_count()} parameters, trained at "
                f"{self.width}x{self.height}, channels {','.join(self.channels)})")

    @property
    def layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(W [out, in], b [out]) per layer, first to last: views into `params`."""
        return [(w[0], b[0]) for w, b in layer_views(self.spec, self.params[None])]

    @property
    def frequencies(self) -> np.ndarray | None:
        """The encoding's parameters, a view into `params`: the Fourier features' B [m, 2], a hash grid's
        tables [entries * F] (docs/hashgrid.md), or None without an encoding."""
        view = frequency_view(self.spec, self.params[None])
        return None if view is None else view[0]

    def __call__(self, coords: np.ndarray, clip: bool = True) -> np.ndarray:
        """Colours [rows, C] float32 at coords [rows, 2] (u, v) in [-1, 1], pixel centres at
        u = (x + 0.5) / W * 2 - 1; clipped to [0, 1] as a render is, unless clip=False."""
        coords = _coords(coords, single=True)
        return _evaluate(self.spec, self.params[None], coords, arguments.flag(clip, "clip"))[0]

    def render(self, size: int | None = None, width: int | None = None, height: int | None = None,
               depth: int = 8, device: str = "auto", region: tuple[int, int, int, int] | None = None) -> np.ndarray:
        """[H, W, C]: the very pixels `inr render` writes with the same options (uint8; depth=16:
        uint16; depth=32: float32, not clipped). No size: the training size; size: the longer side,
        the aspect ratio kept; width and height: exactly that canvas. region (left, top, right,
        bottom): that part of the canvas only (`inr render --region`). A canvas of more than 64
        megapixels is drawn by region, or written in tiles by write_tiles()."""
        from inr_cli.backends import make_backend
        from inr_cli.core.canvas import WHOLE_CANVAS_PIXELS, check_region
        from inr_cli.core.render import render_at_depth

        size, width, height = (arguments.optional_whole(value, name) for value, name in
                               ((size, "size"), (width, "width"), (height, "height")))
        depth = arguments.choice(depth, "depth (bits per channel)", (8, 16, 32))
        device = arguments.choice(device, "device", DEVICES)
        w, h = self._canvas(size, width, height)
        if region is not None:
            if isinstance(region, (str, bytes)) or not isinstance(region, (list, tuple, np.ndarray)):
                raise ArgumentTypeError(f"region is (left, top, right, bottom) in pixels of the canvas, got "
                                        f"{type(region).__name__} {str(region)[:40]}")
            region = check_region(tuple(np.asarray(region).ravel().tolist()), w, h, "region")
        elif w * h > WHOLE_CANVAS_PIXELS:
            raise ArgumentValueError(f"a {w}x{h} canvas is more than {WHOLE_CANVAS_PIXELS >> 20} megapixels to hold "
                                     f"as one array: draw a part of it with region=(left, top, right, bottom) (all "
                                     f"of it: region=(0, 0, {w}, {h})), or write it in tiles with write_tiles(path) "
                                     f"(inr render --tiles)")
        backend = make_backend(device, quiet=True)
        left, top, right, bottom = region if region is not None else (0, 0, w, h)
        check_render(self.spec, right - left, bottom - top, backend, depth)
        return render_at_depth(backend, self.spec, self.params, w, h, depth, region=region)

    def write_tiles(self, path: PathLike, size: int | None = None, width: int | None = None,
                    height: int | None = None, device: str = "auto", force: bool = False) -> Path:
        """The canvas (sized as render's) written as a tiled pyramidal TIFF, a strip of rows drawn at a
        time, as `inr render --tiles` writes it: any size in bounded memory. An existing file is
        replaced only with force=True. Returns the path."""
        from inr_cli.backends import make_backend
        from inr_cli.core.render import tile_rows
        from inr_cli.formats.tiled_tiff import write_pyramid
        from inr_cli.outputs import named_file, output_target

        arguments.path(path, "path")  # a str or a PathLike, not empty
        path = named_file(path, "path")  # read as text: a trailing / names a folder
        size, width, height = (arguments.optional_whole(value, name) for value, name in
                               ((size, "size"), (width, "width"), (height, "height")))
        device = arguments.choice(device, "device", DEVICES)
        force = arguments.flag(force, "force")
        if path.suffix.lower() not in (".tif", ".tiff"):
            raise ArgumentValueError(f"{path}: a tiled pyramid is written as a TIFF (use .tif)")
        w, h = self._canvas(size, width, height)
        target = output_target(path, None, force, [self.run_dir / CHECKPOINT] if self.run_dir else [])
        backend = make_backend(device, quiet=True)
        write_pyramid(target, w, h, self.spec.out_features, tile_rows(backend, self.spec, self.params))
        return target

    def _canvas(self, size: int | None, width: int | None, height: int | None) -> tuple[int, int]:
        """canvas_size's width and height, its refusals in the library's spelling (size=, not --size)."""
        from inr_cli.core.canvas import canvas_size

        if size is not None and (width is not None or height is not None):
            raise ArgumentValueError("give either size or width/height, not both")
        for value, name in ((size, "size"), (width, "width"), (height, "height")):
            if value is not None and value < 1:
                raise ArgumentValueError(f"{name} must be a positive number of pixels, got {value}")
        return canvas_size(self.width, self.height, size, width, height)

    def to_torch(self, clip: bool = True):
        """A torch.nn.Module: coords [rows, 2] -> colours [rows, C], the same function as __call__,
        differentiable, on whatever device it is moved to. Needs the 'torch' extra."""
        from inr_cli.frameworks import to_torch

        return to_torch(self.spec, self.params[None], single=True, clip=arguments.flag(clip, "clip"))

    def to_jax(self, clip: bool = True):
        """(params, apply) with apply(params, coords [rows, 2]) -> colours [rows, C], jittable and
        vmappable. Needs the 'jax' extra."""
        from inr_cli.frameworks import to_jax

        return to_jax(self.spec, self.params[None], single=True, clip=arguments.flag(clip, "clip"))


@_at_the_boundary
class TrainedSet:
    """The networks of an `inr fit-many` folder, one per image, all of one shape (`spec`); or a set of
    latents, one per image, over one base network (`base`: fit-many --init BASE), whose `weights` are
    the latents and whose networks are the base drawn with each."""

    def __init__(self, folder: PathLike, saved: NetworkSet | None = None):
        if saved is not None and not isinstance(saved, NetworkSet):
            raise ArgumentTypeError(f"saved is a NetworkSet (or None: read from folder), got {type(saved).__name__}")
        saved = saved if saved is not None else load_network_set(arguments.path(folder, "folder"))
        self.folder = Path(folder)
        self.spec = saved.spec
        self.channels = tuple(saved.channels)
        self._saved = saved
        self.index: list[dict] = [_typed_row(row) for row in saved.index]
        """The rows of index.csv, one dict per network, every column (numbers as numbers)."""

    @property
    def names(self) -> list[str]:
        return [row["name"] for row in self.index]

    @property
    def weights(self) -> np.ndarray:
        """[N, P] float32, row i the parameters of network i (read from disk as they are used); in a
        set of latents [N, D], row i the latent of image i: what a model learns from."""
        return self._saved.weights

    @property
    def base(self):
        """The base a set of latents is drawn through (core/modulations.ModulatedBase: `spec`, `params`
        [P], `shift_map` [L * H, D], `rates` [D], `inner_steps`, `expand(latents)`); None for a set of
        whole networks."""
        return self._saved.base

    def networks(self) -> np.ndarray:
        """[N, P] float32: every image's whole network (a latent drawn through the base: the base's
        parameters, its hidden biases moved by the latent's shifts)."""
        return self._saved.networks(slice(None))

    def __len__(self) -> int:
        return len(self.index)

    @property
    def labelled(self) -> bool:
        return any(row.get(LABEL) for row in self.index)

    def view(self, classes: Sequence[str] | None = None) -> WeightsView:
        """The whole set as (weights, label) data (weights_data.WeightsView); `classes`: the class
        names in code order, for sets fitted apart that must code their labels alike (one whose
        folders lack a class would otherwise code the others differently)."""
        classes = None if classes is None else arguments.names(classes, "classes")
        if not self.labelled:
            if classes is not None:
                raise ArgumentValueError("classes name the labels of a labelled set; this one has none")
            return WeightsView(self.weights, np.arange(len(self)), None, [], self.names)
        codes, names = label_codes([str(row[LABEL]) for row in self.index], classes)
        return WeightsView(self.weights, np.arange(len(self)), codes, names, self.names)

    @property
    def labels(self) -> np.ndarray:
        """[N] int64: each network's class (index.csv's label column), an index into label_names."""
        return self.view().labels

    @property
    def label_names(self) -> list[str]:
        return self.view().label_names

    def split(self, test: float = 0.2, seed: int = 0, groups: Sequence | None = None,
              classes: Sequence[str] | None = None) -> tuple[WeightsView, WeightsView]:
        """(train, test) views, stratified by label and seeded, or by whole `groups` (one per
        network, in index.csv's order) (WeightsView.split); `classes` as for view()."""
        return self.view(classes).split(test, seed, groups)

    def batches(self, batch_size: int, shuffle: bool = True, seed: int = 0, epoch: int = 0,
                drop_last: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(weights [B, P], labels [B]) NumPy batches of one epoch, shuffled per (seed, epoch)."""
        return self.view().batches(batch_size, shuffle, seed, epoch, drop_last)

    def to_torch_dataset(self):
        """A torch Dataset of (weights [P] tensor, label int) pairs."""
        return self.view().to_torch_dataset()

    def __repr__(self) -> str:
        network = f"{self.spec.model} {self.spec.layers}x{self.spec.hidden}"
        if self.base is not None:
            return (f"TrainedSet({len(self)} latents of {self.base.latent} numbers over a base {network} of "
                    f"{self.spec.parameter_count()} parameters, from {self.folder})")
        return (f"TrainedSet({len(self)} networks of {self.spec.parameter_count()} parameters, {network}, "
                f"from {self.folder})")

    def __getitem__(self, key: str | int) -> TrainedNetwork:
        """The network of an image, by its file name (s["cat.png"]) or its row (s[0])."""
        if isinstance(key, str):
            row = self._saved.row(key)
        elif isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            row = arguments.index(key, "network", len(self))
        else:
            raise ArgumentTypeError(f"a set is indexed by an image's name (str) or a row (int), got "
                                    f"{type(key).__name__}")
        entry = self.index[row]
        return TrainedNetwork(self.spec, self._saved.params(row), self.channels, entry.get("width", 1),
                              entry.get("height", 1))  # a set exported by an older inr: its names alone

    def __iter__(self) -> Iterator[TrainedNetwork]:
        return (self[i] for i in range(len(self)))

    def __call__(self, coords: np.ndarray, clip: bool = True) -> np.ndarray:
        """Colours [N, rows, C] of every network at coords [rows, 2] (the same points for all) or
        [N, rows, 2] (points of their own)."""
        coords = _coords(coords, single=False, networks=len(self))
        return _evaluate(self.spec, self.networks(), coords, arguments.flag(clip, "clip"))

    def to_torch(self, clip: bool = True):
        """A torch.nn.Module: coords [N, rows, 2] (or [rows, 2] for all) -> colours [N, rows, C];
        its parameters are the layers stacked over the networks (layers.I.weight [N, out, in]). A set
        of latents: the base's layers (layers.I.weight [out, in]), its map (modulation.map [L * H, D])
        and the latents (latents [N, D]), the rates a buffer (modulation.rates): the names of its
        safetensors export."""
        from inr_cli.frameworks import to_torch, to_torch_modulated

        clip = arguments.flag(clip, "clip")
        if self.base is not None:
            return to_torch_modulated(self.base, self._saved.stored(slice(None)), clip=clip)
        return to_torch(self.spec, self._saved.stored(slice(None)), single=False, clip=clip)

    def to_jax(self, clip: bool = True):
        """(params, apply): the parameters stacked over the networks, and apply(params, coords
        [N, rows, 2] or [rows, 2]) -> [N, rows, C], the one-network function vmapped. A set of latents:
        {"layers", "map", "rates", "latents"}, the base's layers shared by every latent."""
        from inr_cli.frameworks import to_jax, to_jax_modulated

        clip = arguments.flag(clip, "clip")
        if self.base is not None:
            return to_jax_modulated(self.base, self._saved.stored(slice(None)), clip=clip)
        return to_jax(self.spec, self._saved.stored(slice(None)), single=False, clip=clip)


@_run_errors_for_python()
def load(path: PathLike) -> TrainedNetwork | TrainedSet:
    """A trained network from an `inr train` run directory or its checkpoint.npz, or the set of an
    `inr fit-many` output folder, or of a URL it was written to (-o s3://..., memory://...); a
    .safetensors file `inr export` wrote, as the set or network it holds."""
    if isinstance(path, str) and is_url(path):
        return _load_set_url(path)
    path = arguments.path(path, "path")
    if is_exported_file(path):
        return _load_exported(path)
    return TrainedSet(path) if is_network_set(path) else _load_run(path)


@_run_errors_for_python()
def join(first: PathLike, second: PathLike, out: PathLike) -> TrainedSet:
    """Two sets fitted with the same settings and start, joined into the new folder `out` (inr join):
    every network as it was fitted, the rows sorted by name."""
    from inr_cli.sets.join import join_sets

    first, second, out = (arguments.path(value, name) for value, name in
                          ((first, "first"), (second, "second"), (out, "out")))
    join_sets(first, second, out)
    return TrainedSet(out)


def _load_exported(path: Path) -> TrainedNetwork | TrainedSet:
    """A file `inr export` wrote: a set (every index.csv column back, from its metadata) or one
    network (its training size, where the export recorded it)."""
    from inr_cli.loading import exported_contents

    networks, exported = exported_contents(path)
    if networks is not None:
        return TrainedSet(path, networks)
    return TrainedNetwork(exported.spec, exported.params[0], exported.channels, exported.width, exported.height)


def _load_set_url(url: str) -> TrainedSet:
    """A set written to a URL, its files downloaded (streamed, not held in memory) to a temporary
    folder that is removed when this process ends: the weights are mapped from there as they are
    used, as from a local set."""
    import atexit
    import tempfile

    from inr_cli.errors import InrError
    from inr_cli.formats.network_set import BASE, DESCRIPTION, INDEX, PLAN, WEIGHTS
    from inr_cli.sets.set_folder import SetFolder

    remote = SetFolder(url)
    if not remote.exists(PLAN):
        raise InrError(f"{url}: no inr fit-many set there (no {PLAN})")
    if not remote.exists(WEIGHTS):
        raise InrError(f"{url}: the set is not finished (no {WEIGHTS}); run the same inr fit-many command again")
    local = Path(tempfile.mkdtemp(prefix="inr-set-"))
    atexit.register(shutil.rmtree, local, True)
    fs, root = remote.fs
    for name in (PLAN, DESCRIPTION, INDEX, WEIGHTS, BASE):
        if name == BASE and not remote.exists(BASE):  # a set of whole networks has none
            continue
        try:
            fs.get(f"{root.rstrip('/')}/{name}", str(local / name))
        except (OSError, ValueError) as exc:
            raise InrError(f"{remote.join(name)}: cannot read ({exc})") from None
    trained = TrainedSet(local)
    trained.folder = url
    return trained


def _load_run(path: Path) -> TrainedNetwork:
    saved = one_network(path, None)
    return TrainedNetwork(saved.spec, saved.params, saved.channels, saved.width, saved.height,
                          path if path.is_dir() else path.parent)


@_run_errors_for_python()
def fit(image: PathLike | np.ndarray | None = None, *, preset: str | None = None, config: PathLike | None = None,
        run_dir: PathLike | None = None, quiet: bool = False, settings: dict | None = None,
        **options) -> TrainedNetwork:
    """Train a network on an image, as `inr train` does with the same settings, and return it.
    `image`: a file (an image, a pixel CSV, a .npy array), an array ((H, W) or (H, W, C) of uint8,
    uint16 or floats in [0, 1]), a PIL image, or None for the built-in sample. The run is written
    where `inr train` writes it, and the network's `run_dir` says where: run_dir if given, else
    runs/<name>, or runs/<name>-2, -3 ... when that holds an earlier run (said on stderr unless
    quiet). An array or PIL image is saved in the run as image.npy, so that `inr train --resume`
    finds it (run_dir must then be new or empty). Ctrl-C saves the checkpoint and raises
    KeyboardInterrupt."""
    from inr_cli.runs.start import start_run

    flags = _flags("train", options, _settings(settings))
    preset, quiet = arguments.optional_text(preset, "preset"), arguments.flag(quiet, "quiet")
    config, run_dir = arguments.optional_path(config, "config"), arguments.optional_path(run_dir, "run_dir")
    if image is not None and not isinstance(image, (str, os.PathLike, np.ndarray, list, tuple)) and \
            not hasattr(image, "getdata"):  # a PIL image
        raise ArgumentTypeError(f"image is a file, an array or a PIL image, got {type(image).__name__}")
    if image is None or isinstance(image, (str, os.PathLike)):
        if image is not None and not (isinstance(image, str) and is_url(image)):
            arguments.path(image, "image")  # not empty, no NUL
        result = start_run(None if image is None else os.fspath(image), flags, config, run_dir, quiet, preset)
        return _load_run(result.run_dir)
    array, name = _image_array(image)
    run_dir, made = _array_run_dir(run_dir, name)
    try:
        with atomic_path(run_dir / IMAGE_IN_RUN, suffix=".npy") as tmp, open(tmp, "wb") as handle:
            np.save(handle, array, allow_pickle=False)
        result = start_run(str(run_dir / IMAGE_IN_RUN), flags, config, run_dir, quiet, preset)
    except BaseException:
        if not (run_dir / CHECKPOINT).exists():  # no run began: the folder is left as it was found
            for leftover in [run_dir] if made else [p for p in run_dir.iterdir() if p.name not in IGNORED]:
                if leftover.is_dir():
                    shutil.rmtree(leftover)
                else:
                    leftover.unlink()
        raise
    return _load_run(result.run_dir)


def _image_array(image) -> tuple[np.ndarray, str]:
    """The pixels of an array or a PIL image as the array saved with the run (uint8 stays uint8;
    a 16-bit or float PIL image becomes float32 in [0, 1]), checked; a name for its run."""
    from PIL import Image, ImageOps

    from inr_cli.formats.images import pixels_from_array, pixels_from_pil

    if isinstance(image, Image.Image):
        pixels = pixels_from_pil(ImageOps.exif_transpose(image), gray=False)  # as the file would be read
        array = pixels.pixels
        name = Path(getattr(image, "filename", "") or "image").stem
    else:  # numbers only: text, complex values or None refused by their dtype (arguments.real_array)
        array, name = arguments.real_array(image, "image"), "array"
    try:
        pixels_from_array(array, "image")  # refused here, before anything is written
    except InrError as exc:  # its values or its shape: the argument's
        raise ArgumentValueError(str(exc)) from None
    return array, name


def _array_run_dir(run_dir: Path | None, name: str) -> tuple[Path, bool]:
    """The folder of a run whose image is an array: run_dir if new or empty (the one folder rule,
    outputs.folder_output), else a new runs/<name>; whether it was made here."""
    from inr_cli.outputs import folder_output, make_folder
    from inr_cli.runs.directory import new_run_dir

    if run_dir is not None:
        folder_output(run_dir, lambda folder: False, f"run (an image given as an array starts its run in a new or "
                      f"empty run_dir, saved there as {IMAGE_IN_RUN})", "run_dir")
        made = not os.path.lexists(run_dir)
        make_folder(run_dir)
        return run_dir, made
    while True:  # claimed by its mkdir: two fits started at once never share a folder
        candidate = new_run_dir(name)
        try:
            candidate.mkdir(parents=True)
            return candidate, True
        except FileExistsError:
            continue


@_run_errors_for_python()
def fit_many(folder: PathLike, out: PathLike, *, preset: str | None = None, config: PathLike | None = None,
             pack: int | None = None, ray: str | None = None, workers: int | None = None,
             gpus_per_worker: float | None = None, skip_unreadable: bool = False, quiet: bool = False,
             add: bool = False, labels: PathLike | None = None, force: bool = False, settings: dict | None = None,
             **options) -> TrainedSet | None:
    """One network per image of `folder` (a folder, class folders, a list file or a folder URL), as
    `inr fit-many INPUT -o OUT` fits them with the same settings, and return the set (None when
    `out` is a URL: the set is read where it lies, or copied); running it again resumes (ray:
    "local", "auto" or "ray://host:port", as --ray; add=True grows a finished set by the new images,
    as --add; labels: a CSV of name,label rows, as --labels); `out` must be new, empty or that set,
    unless force=True (as --force)."""
    from inr_cli.sets.driver import fit_folder

    flags = _flags(FIT_MANY, options, _settings(settings))
    folder, out = (value if isinstance(value, str) and is_url(value) else arguments.path(value, name)
                   for value, name in ((folder, "folder"), (out, "out")))
    preset, ray = arguments.optional_text(preset, "preset"), arguments.optional_text(ray, "ray")
    pack, workers = arguments.optional_whole(pack, "pack"), arguments.optional_whole(workers, "workers")
    gpus_per_worker = arguments.optional_real(gpus_per_worker, "gpus_per_worker")  # their values: check_options
    skip_unreadable, quiet, add, force = (arguments.flag(value, name) for value, name in
                                          ((skip_unreadable, "skip_unreadable"), (quiet, "quiet"), (add, "add"),
                                           (force, "force")))
    config, labels = arguments.optional_path(config, "config"), arguments.optional_path(labels, "labels")
    fit_folder(str(folder), str(out), flags, config, preset, pack, ray, workers, gpus_per_worker,
               skip_unreadable, quiet, force, add, labels)
    return None if "://" in str(out) else TrainedSet(out)


# How the library's messages spell a setting: lr_min= and settings={'optimizer.lr_min': 0.001}.
KEYWORDS = Spelling(flag=lambda name: f"{name}=", key=lambda key: f"settings[{key!r}]",
                    key_value=lambda key, value: f"settings={{{key!r}: {value!r}}}")


def _flags(command: str, options: dict, settings: dict) -> dict:
    """{flag name: value} from keyword arguments (named as the flags) and {"section.key": value},
    checked as the command checks its flags and --set, with the messages in the library's spelling.
    The start (init=, settings['training.init']: random, shared or a file) is a path as the other
    path arguments are (arguments.path: a str or a PathLike, not empty, no NUL), handed on as text."""
    options, settings = dict(options), dict(settings)
    for given, key, name in ((options, "init", "init"), (settings, "training.init", "settings['training.init']")):
        if given.get(key) is not None:
            given[key] = os.fspath(arguments.path(given[key], name))
    return given_settings(command, options, settings.items(), KEYWORDS)


def _settings(settings) -> dict:
    if settings is None:
        return {}
    if not isinstance(settings, dict) or not all(isinstance(key, str) for key in settings):
        raise ArgumentTypeError(f"settings is a dict of configuration keys, e.g. {{'optimizer.beta2': 0.95}}, got "
                                f"{type(settings).__name__}")
    return settings


def _coords(coords, single: bool, networks: int = 1) -> np.ndarray:
    array = arguments.float_array(coords, "coords")
    shared = array.ndim == 2 and array.shape[1] == 2
    own = not single and array.ndim == 3 and array.shape[0] == networks and array.shape[2] == 2
    if not (shared or own):
        expected = "[rows, 2]" if single else f"[rows, 2] or [{networks}, rows, 2]"
        raise ArgumentValueError(f"coords of shape {list(array.shape)}: expected {expected} (u, v) in [-1, 1]")
    return array


def _evaluate(spec: NetworkSpec, params: np.ndarray, coords: np.ndarray, clip: bool) -> np.ndarray:
    from inr_cli.backends import get_backend
    from inr_cli.core.render import evaluate_points

    return evaluate_points(get_backend(EVALUATION_DEVICE), spec, params, coords, clip)


def _typed_row(row: dict) -> dict:
    """An index.csv row with its numbers as int or float; the name and the label stay text (class
    folders are often named 0, 1, 2 ...)."""
    typed = {}
    for column, text in row.items():
        typed[column] = text if column in ("name", LABEL) else number_or_text(text)
    return typed


def number_or_text(text):
    """An int or a float where the text is one, else the text (None stays None)."""
    if text is None:
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
