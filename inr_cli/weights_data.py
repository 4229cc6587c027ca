"""The weights of a set as data to learn from: (weights, label) pairs with the labels as integers,
a seeded stratified split, batches shuffled per epoch (NumPy arrays: JAX takes them as they are) and
a PyTorch Dataset, with optional per-parameter standardisation from the training split.

    nets = inr_cli.load("shapes-inr")
    train, test = nets.split(test=0.2, seed=0)
    mean, std = train.statistics()
    for x, y in train.standardized(mean, std).batches(32, seed=0, epoch=epoch): ...

Every array handed out is a writable copy, never a view of the set's memory-mapped file.
"""

from __future__ import annotations

import re
from typing import Iterator, Sequence

import numpy as np

from inr_cli import arguments
from inr_cli.errors import ArgumentValueError, InrError

WHOLE = re.compile(r"-?[0-9]+")  # a label that is a whole number (class folders 0, 1, 2 ...)
STD_FLOOR = 1e-8  # a parameter that does not vary across the split (a shared, untrained one) stays finite


def label_codes(labels: Sequence[str], classes: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Each label as an integer, and the names in code order: `classes` as given (so that sets fitted
    apart, one of which lacks a class, code their labels alike; a label not among them is refused),
    else numerically when every label is a whole number (class folders 2 and 10 keep their order),
    else alphabetically."""
    if classes is not None:
        names = arguments.names(classes, "classes")
        if len(set(names)) != len(names):
            raise ArgumentValueError(f"classes name a class twice: {names}")
        unknown = sorted(set(labels) - set(names))
        if unknown:
            raise ArgumentValueError(f"label {unknown[0]!r} is not one of the classes given ({', '.join(names)})")
    else:
        names = sorted(set(labels), key=lambda text: (0, int(text), "") if _whole(text) else (1, 0, text))
    code = {name: i for i, name in enumerate(names)}
    return np.array([code[label] for label in labels], dtype=np.int64), names


def split_positions(codes: np.ndarray, groups: Sequence | None, test: float,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) positions 0..n-1, sorted. Without groups, each class shuffled with `seed` and its
    share `test` (rounded, at least one where the class has two or more) held out; with groups (one
    per position: a font, a writer, a source photo), whole groups held out, the share `test` of them
    drawn with `seed`, so that no group is on both sides."""
    test = arguments.number(test, "test (the share held out)", above=0, below=1)
    rng = np.random.default_rng(arguments.whole(seed, "seed", 0))
    if groups is not None:
        groups = np.asarray([str(g) for g in arguments.sequence(groups, "groups", len(codes))])
        names = np.unique(groups)
        if len(names) < 2:
            raise ArgumentValueError("groups must name two groups at least, one to train on and one to hold out")
        count = min(max(int(round(test * len(names))), 1), len(names) - 1)
        held = np.isin(groups, names[rng.permutation(len(names))[:count]])
        return np.flatnonzero(~held), np.flatnonzero(held)
    train, held = [], []
    for code in np.unique(codes):
        members = np.flatnonzero(codes == code)
        members = members[rng.permutation(len(members))]
        count = int(round(test * len(members)))
        count = min(max(count, 1 if len(members) > 1 else 0), len(members) - 1 if len(members) > 1 else 0)
        held.append(members[:count])
        train.append(members[count:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(held))


def _whole(text: str) -> bool:
    return WHOLE.fullmatch(text) is not None


class WeightsView:
    """Some rows of a set's weights with their labels (the whole set, or one side of a split)."""

    def __init__(self, weights: np.ndarray, rows: np.ndarray, codes: np.ndarray | None, label_names: list[str],
                 names: list[str], mean: np.ndarray | None = None, std: np.ndarray | None = None):
        self._weights, self.rows, self._codes = weights, np.asarray(rows, dtype=np.int64), codes
        self.label_names, self._names = label_names, names
        self.mean, self.std = mean, std

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        classes = f", {len(self.label_names)} classes" if self._codes is not None else ""
        scaled = ", standardized" if self.mean is not None else ""
        return f"WeightsView({len(self)} networks{classes}{scaled})"

    @property
    def names(self) -> list[str]:
        return [self._names[i] for i in self.rows]

    @property
    def labels(self) -> np.ndarray:
        """[n] int64: each network's class, an index into label_names."""
        if self._codes is None:
            raise InrError("this set has no labels (fit class folders, or give fit-many --labels FILE.csv)")
        return self._codes[self.rows].copy()

    @property
    def weights(self) -> np.ndarray:
        """[n, P] float32, a writable copy (standardized when this view is)."""
        return self._take(self.rows)

    def _take(self, rows: np.ndarray) -> np.ndarray:
        # Fancy indexing of sorted rows reads a memory map in order; the copy is writable.
        order = np.argsort(rows, kind="stable")
        taken = np.empty((len(rows), self._weights.shape[1]), dtype=np.float32)
        taken[order] = self._weights[rows[order]]
        finite = np.isfinite(taken).all(axis=1)
        if not finite.all():  # as set[i] and the checkpoint reader refuse them
            raise InrError(f"{self._names[rows[int(np.argmin(finite))]]}: its network's parameters hold NaN or "
                           f"infinite values (a damaged set)")
        if self.mean is not None:
            with np.errstate(over="ignore"):  # refused below, not NumPy's warning
                taken -= self.mean
                taken /= self.std
            overflowed = ~np.isfinite(taken).all(axis=1)
            if overflowed.any():  # (w - mean) / std beyond float32, however small std is allowed to be
                row = int(np.argmax(overflowed))
                column = int(np.argmin(np.isfinite(taken[row])))
                raise ArgumentValueError(f"standardized weights beyond float32's range: parameter {column} of "
                                         f"{self._names[rows[row]]} (mean {float(self.mean[column]):g}, std "
                                         f"{float(self.std[column]):g}); give a mean and std of the set's weights "
                                         f"(statistics())")
        return taken

    def split(self, test: float = 0.2, seed: int = 0, groups: Sequence | None = None
              ) -> tuple["WeightsView", "WeightsView"]:
        """(train, test): each class shuffled with `seed` and its share `test` (rounded, at least one
        where the class has two or more) put in the test view; unlabelled sets split as one class.
        With `groups` (one per network of this view, in its order: the font of a letter, the photo
        a crop is from), whole groups go to one side: held-out fonts, not held-out images."""
        codes = self._codes[self.rows] if self._codes is not None else np.zeros(len(self.rows), dtype=np.int64)
        train, held = split_positions(codes, groups, test, seed)
        return self._with_rows(self.rows[train]), self._with_rows(self.rows[held])

    def _with_rows(self, rows: np.ndarray) -> "WeightsView":
        return WeightsView(self._weights, rows, self._codes, self.label_names, self._names, self.mean, self.std)

    def statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-parameter mean and standard deviation [P] of these networks (of the raw weights),
        for standardized(): computed on the training split, applied to both."""
        if len(self) == 0:
            raise ArgumentValueError("statistics of a view of no networks: split a larger set, or hold out less")
        raw = self._with_rows(self.rows)
        raw.mean = raw.std = None
        weights = raw.weights.astype(np.float64)
        return (weights.mean(axis=0).astype(np.float32),
                np.maximum(weights.std(axis=0), STD_FLOOR).astype(np.float32))

    def standardized(self, mean: np.ndarray, std: np.ndarray) -> "WeightsView":
        """The same networks, their weights handed out as (w - mean) / std."""
        width, given = self._weights.shape[1], std
        mean, std = arguments.float_array(mean, "mean", (width,)), arguments.float_array(std, "std", (width,))
        if not (std > 0).all():
            raise ArgumentValueError(f"std must be positive for every parameter, got {float(std.min()):g}")
        with np.errstate(divide="ignore", over="ignore"):  # refused below, not NumPy's warning
            unbounded = ~np.isfinite(np.float32(1) / std)
        if unbounded.any():  # (w - mean) / std would be infinite: a std below float32's 1 / 3.4e38
            at = int(np.argmax(unbounded))
            raise ArgumentValueError(f"std holds {float(np.asarray(given).reshape(-1)[at]):g} (parameter {at}), too "
                                     f"small to divide by in float32 (its reciprocal is infinite): give at least "
                                     f"3e-39 (statistics() floors it at {STD_FLOOR:g})")
        view = self._with_rows(self.rows)
        view.mean, view.std = mean, std
        return view

    def order(self, shuffle: bool = True, seed: int = 0, epoch: int = 0) -> np.ndarray:
        """Positions 0..n-1 in the order of an epoch: a permutation drawn from (seed, epoch), so each
        epoch has its own and a rerun the same."""
        if not arguments.flag(shuffle, "shuffle"):
            return np.arange(len(self))
        seed, epoch = arguments.whole(seed, "seed", 0), arguments.whole(epoch, "epoch", 0)
        return np.random.default_rng([seed, epoch]).permutation(len(self))

    def batches(self, batch_size: int, shuffle: bool = True, seed: int = 0, epoch: int = 0,
                drop_last: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(weights [B, P] float32, labels [B] int64) batches of one epoch, NumPy arrays (jnp.asarray
        takes them as they are); labels are -1 for an unlabelled set."""
        batch_size = arguments.whole(batch_size, "batch_size", 1)
        drop_last = arguments.flag(drop_last, "drop_last")
        positions = self.order(shuffle, seed, epoch)  # checked here, when called, not at the first batch
        return self._batches(positions, batch_size, drop_last)

    def _batches(self, positions: np.ndarray, batch_size: int, drop_last: bool):
        codes = self._codes if self._codes is not None else np.full(len(self._names), -1, dtype=np.int64)
        for start in range(0, len(positions), batch_size):
            chosen = self.rows[positions[start:start + batch_size]]
            if drop_last and len(chosen) < batch_size:
                break
            yield self._take(chosen), codes[chosen].copy()

    def to_torch_dataset(self):
        """A torch.utils.data.Dataset of (weights [P] float32 tensor, label int) pairs; shuffle with
        a DataLoader (shuffle=True, a seeded generator)."""
        from inr_cli.extras import require

        torch = require("torch", "to_torch_dataset()", "torch")

        view = self

        class NetworkWeights(torch.utils.data.Dataset):
            def __len__(self):
                return len(view)

            def __getitem__(self, i):
                position = arguments.index(i, "network", len(view))
                row = view.rows[position:position + 1]
                label = int(view._codes[row[0]]) if view._codes is not None else -1
                return torch.from_numpy(view._take(row)[0]), label

        return NetworkWeights()
