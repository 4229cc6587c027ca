"""What `inr view` shows: one run, followed as it trains, or a set of networks, browsed by page.

Both answer the server's questions the same way: the network `net` (with a version that changes when
its weights do), its state for the page, and the image it was trained on, re-encoded as PNG.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from inr_cli.config import used_settings
from inr_cli.core.network import NetworkSpec
from inr_cli.errors import InrError
from inr_cli.formats import checkpoint as ckpt
from inr_cli.formats.data import load_training_data, same_data
from inr_cli.formats.images import fit_longer_side
from inr_cli.formats.network_set import PLAN, is_network_set, load_network_set
from inr_cli.formats.png import png_bytes
from inr_cli.limits import shrink_factor
from inr_cli.runs.metrics_csv import read_metrics
from inr_cli.sets import inputs
from inr_cli.sets.inputs import is_url
from inr_cli.sets.plan import Plan
from inr_cli.viewer.tiles import PngCache, Pyramid, block_mean, source_tile

CURVE_POINTS = 400  # the loss curve is drawn from at most this many rows of metrics.csv
THUMBNAIL_SIDE = 128
PAGE_LIMIT = 500
TRAINING_TILE_BYTES = 8 << 20  # the tiles of one training image kept (they are cheap to make again)
SORTS = ("psnr", "-psnr", "name", "-name", "loss", "-loss")


@dataclass(frozen=True)
class Shown:
    """One network as drawn: its weights at one version, and the training image's size."""

    version: str
    spec: NetworkSpec
    params: np.ndarray  # [P]
    width: int
    height: int

    @property
    def pyramid(self) -> Pyramid:
        return Pyramid.for_image(self.width, self.height)


def image_pixels(read) -> np.ndarray | None:
    """The training image as the training loaded it (read() -> PixelImage), (H, W, C) uint8; None when
    it cannot be read."""
    try:
        image = read()
    except (InrError, OSError, ValueError):
        return None
    if image.pixels.dtype == np.uint8:
        return image.pixels
    return np.round(np.clip(image.values, 0.0, 1.0) * 255.0).astype(np.uint8)


class TrainingImage:
    """The image a network was trained on, as the page shows it: whole (PNG), and as tiles of the
    network's pyramid that show its pixels as pixels however deep the zoom."""

    def __init__(self, pixels: np.ndarray, pyramid: Pyramid):
        self.pixels = pixels
        self.pyramid = pyramid
        self._png = None
        self.tiles = PngCache(TRAINING_TILE_BYTES)

    @property
    def png(self) -> bytes:
        """The image whole, within a picture's limits (a large one's blocks averaged: pictures.picture_size)."""
        if self._png is None:
            height, width = self.pixels.shape[:2]
            shrunk = block_mean(self.pixels, shrink_factor(width, height))
            self._png = png_bytes(np.ascontiguousarray(shrunk), threads=1)
        return self._png

    @property
    def nbytes(self) -> int:
        return self.pixels.nbytes + len(self.png) + TRAINING_TILE_BYTES

    def tile(self, level: int, x: int, y: int) -> bytes:
        """ValueError for a tile outside the pyramid."""
        data = self.tiles.get((level, x, y))
        if data is None:
            data = png_bytes(np.ascontiguousarray(source_tile(self.pixels, self.pyramid, level, x, y)), threads=1)
            self.tiles.put((level, x, y), data)
        return data


def load_training_image(read, shown: Shown) -> TrainingImage | None:
    """The training image of a shown network (read() -> PixelImage), or None when it cannot be read
    or no longer has the size the network was trained at."""
    pixels = image_pixels(read)
    if pixels is None or pixels.shape[:2] != (shown.height, shown.width):
        return None
    return TrainingImage(pixels, shown.pyramid)


def _curve(rows: list[dict]) -> dict:
    stride = max(1, -(-len(rows) // CURVE_POINTS))
    kept = rows[::stride] + ([rows[-1]] if rows and (len(rows) - 1) % stride else [])
    return {key: [row[key] for row in kept] for key in ("step", "loss", "psnr")}


class NoSuchNetwork(LookupError):
    """A network number the run or set does not have (the server answers 404, and only to this)."""


class RunView:
    """An `inr train` run. Its checkpoint is read again whenever the file changes (a training run
    replaces it atomically), so the page follows the run as it learns."""

    kind = "run"

    def __init__(self, path: Path):
        self.checkpoint_path = ckpt.resolve(Path(path))
        self.run_dir = self.checkpoint_path.parent
        self.name = self.run_dir.resolve().name
        self.lock = threading.Lock()
        self.stamp = None
        self.saved = None
        self.shown: Shown | None = None
        self.metrics_stamp = None
        self.metrics: list[dict] = []
        self._refresh()
        data, trained_on = self.saved.config.data, self.saved.data_fingerprint
        self.source = load_training_image(lambda: _trained_on(
            load_training_data(data.source, data.size, data.gray), trained_on), self.shown)

    def _refresh(self) -> None:
        """Read the checkpoint again if it changed; a checkpoint that cannot be read keeps the last one."""
        with self.lock:
            try:
                status = os.stat(self.checkpoint_path)
            except OSError:
                return
            stamp = (status.st_mtime_ns, status.st_size, status.st_ino)
            if stamp == self.stamp:
                return
            try:
                saved = ckpt.load(self.checkpoint_path, moments=False)
            except InrError:
                if self.saved is None:
                    raise
                return
            height, width, _ = saved.data_shape
            self.stamp, self.saved = stamp, saved
            self.shown = Shown(f"{saved.step}-{status.st_mtime_ns:x}", saved.spec, saved.params, width, height)

    def network(self, net: int) -> Shown:
        if net != 0:
            raise NoSuchNetwork(net)
        self._refresh()
        return self.shown

    def thumbnail_size(self, net: int) -> tuple[int, int]:
        shown = self.network(net)
        return fit_longer_side(shown.width, shown.height, THUMBNAIL_SIDE)

    def _curve(self) -> dict:
        path = self.run_dir / "metrics.csv"
        try:
            stamp = os.stat(path).st_mtime_ns
        except OSError:
            return _curve([])
        if stamp != self.metrics_stamp:
            self.metrics, self.metrics_stamp = read_metrics(self.run_dir), stamp
        return _curve(self.metrics)

    def state(self, net: int, **gallery) -> dict:
        """The run's state for the page (gallery: a set's list order, which a run has no use for)."""
        self.network(net)
        with self.lock:  # the checkpoint and what was drawn from it, from one reading
            saved, shown = self.saved, self.shown
        curve = self._curve()
        return {
            "kind": self.kind, "net": 0, "name": self.name, "version": shown.version,
            "step": saved.step, "total_steps": saved.total_steps, "seconds": saved.state.seconds,
            "loss": saved.last_loss, "psnr": curve["psnr"][-1] if curve["psnr"] else None,
            "width": shown.width, "height": shown.height, "channels": list(saved.channels),
            "settings": used_settings(saved.config), "pyramid": shown.pyramid.to_json(), "curve": curve,
            "source": self.source is not None,
        }

    def training_image(self, net: int) -> TrainingImage | None:
        if net != 0:
            raise NoSuchNetwork(net)
        return self.source


class SetView:
    """An `inr fit-many` folder: its index sorted, filtered and paged here, so that a set of a hundred
    thousand networks sends the page one page at a time."""

    kind = "set"

    def __init__(self, path: Path, trust: bool = False):
        self.path = Path(path)
        self.name = self.path.resolve().name
        self.set = load_network_set(self.path)
        self.plan = Plan.read(self.path / PLAN)
        self.config = self.plan.config
        self.sources_allowed = SourcePolicy(self.plan, trust)
        index = self.set.index
        self.names = [row["name"] for row in index]
        self.psnr = np.array([_number(row.get("psnr")) for row in index])
        self.loss = np.array([_number(row.get("loss")) for row in index])
        self.has_labels = bool(index) and "label" in index[0]
        self.labels = np.array([row.get("label") or "" for row in index] if self.has_labels else [], dtype=object)
        self.label_names = sorted(set(self.labels)) if self.has_labels else None
        self.orders: dict[str, np.ndarray] = {}
        self.sources = PngCache()  # the training images, decoded once: the page shows each whole and in tiles

    def order(self, sort: str) -> np.ndarray:
        """Row numbers in the order asked for (NaN last either way), computed once per order."""
        if sort not in SORTS:
            raise ValueError(f"sort is one of {', '.join(SORTS)}, got '{sort}'")
        if sort not in self.orders:
            key = sort.lstrip("-")
            if key == "name":
                order = np.array(sorted(range(len(self.names)), key=self.names.__getitem__), dtype=np.int64)
                order = order[::-1] if sort.startswith("-") else order
            else:
                values = self.psnr if key == "psnr" else self.loss
                signed = -values if sort.startswith("-") else values
                order = np.argsort(np.where(np.isnan(signed), np.inf, signed), kind="stable")
            self.orders[sort] = order
        return self.orders[sort]

    def chosen(self, sort: str = "-psnr", label: str | None = None, query: str = "") -> np.ndarray:
        """Row numbers of the networks the gallery lists: in the order asked for, of one label, with
        names that contain the query."""
        order = self.order(sort)
        if label:
            if not self.has_labels:
                raise ValueError("this set's index.csv has no label column")
            order = order[self.labels[order] == label]
        if query:
            needle = query.lower()
            order = order[np.array([needle in self.names[i].lower() for i in order], dtype=bool)]
        return order

    def page(self, sort: str = "-psnr", label: str | None = None, query: str = "", offset: int = 0,
             limit: int = 60) -> dict:
        if not 1 <= limit <= PAGE_LIMIT or offset < 0:
            raise ValueError(f"limit is 1..{PAGE_LIMIT} and offset at least 0, got {limit} and {offset}")
        order = self.chosen(sort, label, query)
        rows = [self.row(int(i)) for i in order[offset:offset + limit]]
        return {"total": int(len(order)), "count": len(self.names), "offset": offset, "rows": rows,
                "labels": self.label_names}

    def position(self, net: int, sort: str = "-psnr", label: str | None = None, query: str = "") -> dict | None:
        """Where a network stands in the gallery's list (its index, the list's length, the networks
        before and after it), or None when the list leaves it out."""
        order = self.chosen(sort, label, query)
        found = np.flatnonzero(order == net)
        if not len(found):
            return None
        at = int(found[0])
        return {"index": at, "total": int(len(order)), "previous": int(order[at - 1]) if at > 0 else None,
                "next": int(order[at + 1]) if at + 1 < len(order) else None}

    def row(self, net: int) -> dict:
        entry = self.set.index[net]
        row = {"net": net, "name": entry["name"], "psnr": float(self.psnr[net]),  # NaN: null, in the server
               "loss": float(self.loss[net]), "width": int(entry["width"]), "height": int(entry["height"])}
        if self.has_labels:
            row["label"] = self.labels[net]
        return row

    def network(self, net: int) -> Shown:
        if not 0 <= net < len(self.names):
            raise NoSuchNetwork(net)
        entry = self.set.index[net]
        return Shown("set", self.set.spec, self.set.networks([net])[0], int(entry["width"]), int(entry["height"]))

    def thumbnail_size(self, net: int) -> tuple[int, int]:
        entry = self.set.index[net]
        return fit_longer_side(int(entry["width"]), int(entry["height"]), THUMBNAIL_SIDE)

    def state(self, net: int, sort: str = "-psnr", label: str | None = None, query: str = "") -> dict:
        shown = self.network(net)
        return {"kind": self.kind, "net": net, "name": self.names[net], "version": shown.version,
                "width": shown.width, "height": shown.height, "channels": list(self.set.channels),
                "settings": used_settings(self.config, one_network=False, latents=bool(self.set.latent)),
                "pyramid": shown.pyramid.to_json(), "row": self.row(net),
                "count": len(self.names), "position": self.position(net, sort, label, query),
                "source": self._source_reachable(net)}

    def _source_reachable(self, net: int) -> bool:
        location = self.sources_allowed.location(self.plan.entry(self.names[net]))
        return location is not None and (is_url(location) or Path(location).is_file())

    def training_image(self, net: int) -> TrainingImage | None:
        shown = self.network(net)
        image = self.sources.get(net)
        if image is None:
            entry = self.plan.entry(self.names[net])
            image = load_training_image(lambda: self.sources_allowed.load(entry, self.config), shown)
            if image is not None:
                self.sources.put(net, image)
        return image


def _trained_on(image, trained_on: str):
    """The image a run loaded, if it is the one the run was trained on: a checkpoint names any path."""
    if not same_data(image, trained_on):
        raise InrError("not the image this run was trained on")
    return image


class SourcePolicy:
    """Where `inr view` may read a set's training images. fit-many.json is a file that anyone could
    have written (a set downloaded, a plan edited), so it names nothing the viewer follows blindly:
    a path is read only inside the set's input folder (a list file's own folder), a URL never, and a
    file is shown only when its bytes are the ones planned (their fingerprint). --trust (trust=True)
    lets the viewer read any path or URL the plan names; the fingerprint is checked all the same."""

    def __init__(self, plan: Plan, trust: bool):
        self.trust = trust
        folder = plan.folder
        root = folder if is_url(folder) or os.path.isdir(folder) else os.path.dirname(folder)
        self.roots = [] if is_url(root) or not root else \
            [os.path.join(os.path.normpath(root), ""), os.path.join(os.path.realpath(root), "")]
        self.withheld = 0 if trust else sum(1 for entry in plan.images if not self._inside(entry.location, quick=True))

    def _inside(self, location: str, quick: bool = False) -> bool:
        if is_url(location) or not self.roots:
            return False
        if quick:  # the path as written, for the count said at start
            path = os.path.normpath(location)
            return any(path.startswith(root) for root in self.roots)
        return os.path.realpath(location).startswith(self.roots[1])  # resolved, links and all

    def location(self, entry) -> str | None:
        """Where the image of the plan's `entry` may be read; None where it may not."""
        return entry.location if self.trust or self._inside(entry.location) else None

    def load(self, entry, config):
        location = self.location(entry)
        if location is None:
            raise InrError(f"{entry.location}: outside the set's input folder (inr view --trust reads it)")
        return inputs.load(location, entry.name, config, expected=entry.sha256)[0]


def _number(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def open_view(path: Path, trust: bool = False) -> RunView | SetView:
    """The run or set at `path`, read once now so that a bad path is one error before any serving
    (trust: a set's training images are read wherever its plan says, SourcePolicy)."""
    return SetView(path, trust) if is_network_set(path) else RunView(path)
