"""Learning on a set's weights, measured: a labelled suite made from what the registries ship.

Three data sets of 32-px images, each made here (nothing of them is kept in the repository):
- letters: A to J in every text font of Debian's font packages (fonts-dejavu-core, fonts-dejavu-extra,
  fonts-liberation, fonts-freefont-ttf, fonts-urw-base35, fonts-crosextra-carlito, -caladea), grey,
  classes = letters, split by font: the held-out images are of fonts never seen in training;
- photos: tiles of four photos (the two test photos, scikit-learn's china.jpg and flower.jpg), colour,
  classes = the photo, tiles that do not overlap, split at random within each photo;
- digits: scikit-learn's 8x8 digits, scaled to 32 px, grey, classes = digits, split at random;
- kodak (only when named): tiles of the Kodak-24 photos ($INR_KODAK, else ../shared/kodak beside the
  checkout; never copied into the repository), cut as the photos' are: a set of natural tiles six
  times the photos' (classes = the 24 photos).

Each data set is fitted as one set by `inr fit-many` per recipe and start (random, shared, learned:
a start from `inr meta-init` on the training split only), then its weights are learned from through
the loader (inr_cli.weights_data): (a) a linear probe (logistic regression, scikit-learn, its
strength chosen by cross-validation on the training split), (b) a small MLP in PyTorch, fed by the
loader's torch Dataset, and the same two on the pixels as the reference; accuracy on the held-out
split, with the mean PSNR (index.csv's, of the clipped render), steps and seconds per image.

    apt-get install fonts-dejavu-core fonts-dejavu-extra fonts-liberation fonts-freefont-ttf \\
        fonts-urw-base35 fonts-crosextra-carlito fonts-crosextra-caladea
    pip install '.[benchmark]'     # scikit-learn and torch
    PYTHONPATH=. python benchmarks/weights_suite.py --recipes default sets --starts random shared learned
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw, ImageFont  # noqa: E402

import inr_cli  # noqa: E402  (first: it sets OpenBLAS's thread timeout before NumPy loads OpenBLAS)
from benchmarks.common import PHOTOS, environment, save_json  # noqa: E402
from inr_cli.weights_data import label_codes, split_positions  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
KODAK = Path(os.environ.get("INR_KODAK", Path(__file__).resolve().parent.parent.parent / "shared" / "kodak"))
FONT_FOLDERS = [Path("/usr/share/fonts/truetype"), Path("/usr/share/fonts/opentype")]
# Fonts whose letters are pictures, not letters
NOT_TEXT = ("Symbol", "D050000L", "Dingbat", "Emoji")
LETTERS = "ABCDEFGHIJ"
TEST_SHARE = 0.3

# Fitting recipes: fit-many's settings beyond the network and the image size. "default" is what
# fit-many does with nothing said (the sets preset); the others differ from the preset they name (the
# sets preset where they name none) in what they name.
RECIPES = {
    "default": {},
    "siren": {"preset": "siren"},  # the single image's preset (fit-many's default before the sets preset)
    "paper": {"preset": "siren", "omega0": 30.0, "lr": 1e-4, "lr_min": 1e-4, "init_output_at_mean": False,
              "settings": {"optimizer.beta2": 0.999}},  # the SIREN paper's: constant 1e-4, PyTorch's Adam
    "w30-lr1e-3": {"preset": "siren", "omega0": 30.0, "lr": 1e-3},
    "w30-lr1e-3-zero": {"preset": "siren", "omega0": 30.0, "lr": 1e-3, "init_output_at_mean": False},
    "w30-lr3e-4": {"preset": "siren", "omega0": 30.0, "lr": 3e-4},
    "w30-lr3e-4-zero": {"preset": "siren", "omega0": 30.0, "lr": 3e-4, "init_output_at_mean": False},
    "w30-lr1e-3-until35": {"preset": "siren", "omega0": 30.0, "lr": 1e-3, "until_psnr": 35.0},
    "w30-lr1e-4-held": {"preset": "siren", "omega0": 30.0, "lr": 1e-4, "lr_min": 1e-4},
    "w15-lr1e-3": {"preset": "siren", "omega0": 15.0, "lr": 1e-3},
    "w30-lr3e-3": {"preset": "siren", "omega0": 30.0, "lr": 3e-3},
    "w45-lr1e-3": {"preset": "siren", "omega0": 45.0, "lr": 1e-3},
    "w30-lr3e-4-ws2": {"preset": "siren", "omega0": 30.0, "lr": 3e-4, "weight_scale": 2.0},
    # a learned start's outputs at each image's mean colour, in meta-init's inner fits and in the fits
    # from it (a draw's outputs follow init_output_at_mean: the shared start's stay at mid-grey)
    "start-at-mean": {"start_output_at_mean": True},
    "start-at-mean-lr3e-3": {"start_output_at_mean": True, "lr": 3e-3},
    "lr3e-3": {"lr": 3e-3},
    # the sets preset with one setting changed
    "omega0-15": {"omega0": 15.0},
    "omega0-45": {"omega0": 45.0},
    "until40": {"until_psnr": 40.0},
    "weight-scale2": {"weight_scale": 2.0},
}


# ---- the data sets: each writes FOLDER/<class>/<image>.png and returns {name: group} ----

def text_fonts() -> list[Path]:
    found = sorted(p for folder in FONT_FOLDERS if folder.is_dir() for p in folder.rglob("*")
                   if p.suffix.lower() in (".ttf", ".otf") and not any(word in p.name for word in NOT_TEXT))
    return found


def letter(char: str, font: ImageFont.FreeTypeFont, size: int) -> Image.Image:
    """A black letter on white, its box scaled to 80% of size x size and centred (Lanczos)."""
    canvas = Image.new("L", (256, 256), 255)
    ImageDraw.Draw(canvas).text((64, 32), char, font=font, fill=0)
    box = Image.eval(canvas, lambda v: 255 - v).getbbox()
    if box is None:
        raise ValueError(f"{font.path}: draws nothing for {char}")
    glyph = canvas.crop(box)
    scale = 0.8 * size / max(glyph.size)
    glyph = glyph.resize((max(1, round(glyph.width * scale)), max(1, round(glyph.height * scale))), Image.LANCZOS)
    out = Image.new("L", (size, size), 255)
    out.paste(glyph, ((size - glyph.width) // 2, (size - glyph.height) // 2))
    return out


def make_letters(folder: Path, size: int, limit: int | None = None) -> dict[str, str]:
    fonts = text_fonts()
    if limit:  # a seeded draw across the families, not the first few of one
        fonts = [fonts[i] for i in sorted(np.random.default_rng(0).permutation(len(fonts))[:limit])]
    if len(fonts) < 4:
        raise SystemExit("letters: fewer than 4 text fonts under /usr/share/fonts (apt-get install "
                         "fonts-dejavu-core fonts-liberation fonts-freefont-ttf fonts-urw-base35)")
    groups = {}
    for path in fonts:
        font = ImageFont.truetype(str(path), 128)
        for char in LETTERS:
            (folder / char).mkdir(parents=True, exist_ok=True)
            letter(char, font, size).save(folder / char / f"{path.stem}.png")
            groups[f"{char}/{path.stem}.png"] = path.stem
    return groups


def sample_photos() -> dict[str, Image.Image]:
    from sklearn.datasets import load_sample_image

    photos = {name: Image.open(path).convert("RGB") for name, path in PHOTOS.items()}
    for name in ("china", "flower"):
        photos[name] = Image.fromarray(load_sample_image(f"{name}.jpg"))
    return photos


def make_photos(folder: Path, size: int, side: int = 256, limit: int | None = None,
                photos: dict[str, Image.Image] | None = None) -> dict[str, str]:
    """Tiles of size x size of each photo (the suite's four unless `photos`) scaled so that its shorter
    side is `side` (no two overlap)."""
    groups = {}
    for name, photo in (photos or sample_photos()).items():
        scale = side / min(photo.size)
        photo = photo.resize((round(photo.width * scale), round(photo.height * scale)), Image.LANCZOS)
        (folder / name).mkdir(parents=True, exist_ok=True)
        tiles = [(x, y) for y in range(0, photo.height - size + 1, size)
                 for x in range(0, photo.width - size + 1, size)]
        if limit:
            tiles = [tiles[i] for i in sorted(np.random.default_rng(0).permutation(len(tiles))[:limit])]
        for x, y in tiles:
            photo.crop((x, y, x + size, y + size)).save(folder / name / f"{x:03d}-{y:03d}.png")
            groups[f"{name}/{x:03d}-{y:03d}.png"] = f"{name}/{x:03d}-{y:03d}"
    return groups


def make_digits(folder: Path, size: int, per_class: int = 60) -> dict[str, str]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    groups, taken = {}, {}
    for image, target in zip(digits.images, digits.target):
        count = taken.get(int(target), 0)
        if count >= per_class:
            continue
        taken[int(target)] = count + 1
        (folder / str(target)).mkdir(parents=True, exist_ok=True)
        pixels = Image.fromarray(np.uint8(255 - image * (255 / 16)))  # dark digits on white, as the letters
        pixels.resize((size, size), Image.BICUBIC).save(folder / str(target) / f"{count:03d}.png")
        groups[f"{target}/{count:03d}.png"] = f"{target}/{count:03d}"
    return groups


def make_shapes(folder: Path, size: int, per_class: int = 40) -> dict[str, str]:
    """Drawn shapes of four classes at random places, sizes and colours (weights_classification.py's):
    the set none of the recipes or bases was tuned on."""
    from benchmarks.weights_classification import draw_shapes

    draw_shapes(folder, per_class, size, seed=7)
    return {f"{label}/{path.name}": f"{label}/{path.stem}" for label in sorted(p.name for p in folder.iterdir())
            for path in sorted((folder / label).iterdir())}


def make_kodak_tiles(folder: Path, size: int, limit: int | None = None) -> dict[str, str]:
    """Tiles of the Kodak-24 photos, cut as make_photos cuts the suite's four."""
    found = sorted(KODAK.glob("kodim*.png"))
    if not found:
        raise SystemExit(f"kodak: no kodim*.png in {KODAK} (name the folder in INR_KODAK)")
    return make_photos(folder, size, limit=limit, photos={path.stem: Image.open(path).convert("RGB") for path in found})


DATASETS = {"letters": (make_letters, True), "photos": (make_photos, False), "digits": (make_digits, True),
            "shapes": (make_shapes, False), "kodak": (make_kodak_tiles, False)}
DEFAULT_DATASETS = ["letters", "photos", "digits", "shapes"]  # kodak only when named: its photos are not shipped
# (maker, grey); the split: by font for the letters, by image for the others
GROUPED = {"letters"}


def make(name: str, folder: Path, size: int, limit: int | None) -> tuple[dict[str, str], bool]:
    maker, gray = DATASETS[name]
    if name in ("digits", "shapes"):
        return maker(folder, size, limit or (60 if name == "digits" else 40)), gray
    return maker(folder, size, limit=limit), gray


def made_or_kept(dataset: str, root: Path, size: int, limit: int | None) -> tuple[dict, bool]:
    """({image name: group}, grey?) of the data set in ROOT/<dataset>, made there unless a run made it
    before (its groups kept beside it)."""
    groups_file = root / f"{dataset}.groups.json"
    if groups_file.exists():
        return json.loads(groups_file.read_text()), DATASETS[dataset][1]
    groups, gray = make(dataset, root / dataset, size, limit)
    groups_file.write_text(json.dumps(groups))
    return groups, gray


def split_names(names: list[str], groups: dict[str, str], grouped: bool, seed: int) -> tuple[list[str], list[str]]:
    """The suite's split of a data set's image names (the loader's split, applied before any fit)."""
    codes, _ = label_codes([name.split("/", 1)[0] for name in names])
    train, test = split_positions(codes, [groups[n] for n in names] if grouped else None, TEST_SHARE, seed)
    return [names[i] for i in train], [names[i] for i in test]


# ---- learning on the weights (and on the pixels) ----

def linear_probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray) -> float:
    """Logistic regression on features standardised by the training split; its strength by 3-fold
    cross-validation on the training split. NaN where scikit-learn is missing (the GPU machine's
    Python has PyTorch, whose MLP probe still runs, and not scikit-learn)."""
    try:
        from sklearn.linear_model import LogisticRegressionCV
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
    except ImportError:
        return float("nan")

    model = make_pipeline(StandardScaler(), LogisticRegressionCV(Cs=[1e-3, 1e-2, 1e-1, 1.0], cv=3, max_iter=3000))
    with warnings.catch_warnings():  # scikit-learn's notices of defaults to come, for each fit
        warnings.simplefilter("ignore", FutureWarning)
        model.fit(train_x, train_y)
    return float(model.score(test_x, test_y))


def mlp_probe(torch, train_data, test_data, inputs: int, classes: int, seed: int, epochs: int = 60) -> float:
    """A small MLP (inputs -> 256 -> classes, ReLU, dropout), Adam with weight decay, trained on a
    torch Dataset of (x, label) pairs; accuracy on test_data."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Dropout(0.2), torch.nn.Linear(inputs, 256), torch.nn.ReLU(),
                                torch.nn.Dropout(0.5), torch.nn.Linear(256, classes))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    loader = torch.utils.data.DataLoader(train_data, batch_size=32, shuffle=True, generator=generator)
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(test_data, batch_size=256):
            correct += int((model(x).argmax(dim=1) == y).sum())
    return correct / len(test_data)


def pixels_of(folder: Path, names: list[str], gray: bool) -> np.ndarray:
    return np.stack([np.asarray(Image.open(folder / n).convert("L" if gray else "RGB"), dtype=np.float32).ravel()
                     / 255 for n in names])


def from_pixels(torch, folder: Path, train: list[str], test: list[str], seed: int, gray: bool) -> dict:
    codes, classes = label_codes([n.split("/", 1)[0] for n in train + test])
    train_y, test_y = codes[:len(train)], codes[len(train):]
    train_x, test_x = pixels_of(folder, train, gray), pixels_of(folder, test, gray)
    mean, std = train_x.mean(axis=0), np.maximum(train_x.std(axis=0), 1e-8)

    def dataset(x, y):
        return torch.utils.data.TensorDataset(torch.from_numpy((x - mean) / std), torch.from_numpy(y))

    return {"linear": linear_probe(train_x, train_y, test_x, test_y),
            "mlp": mlp_probe(torch, dataset(train_x, train_y), dataset(test_x, test_y), train_x.shape[1],
                             len(classes), seed)}


def from_weights(torch, set_folder: Path, groups: dict[str, str] | None, test_names: list[str], seed: int) -> dict:
    """Both probes on the set's weights through the loader, split by it as split_names split the
    images (the held-out names checked against those)."""
    nets = inr_cli.load(set_folder)
    train, test = nets.split(TEST_SHARE, seed, groups=None if groups is None else [groups[n] for n in nets.names])
    if sorted(test.names) != sorted(test_names):
        raise AssertionError("the loader's split is not the suite's")
    mean, std = train.statistics()
    train_s, test_s = train.standardized(mean, std), test.standardized(mean, std)
    return {"linear": linear_probe(train.weights, train.labels, test.weights, test.labels),
            "mlp": mlp_probe(torch, train_s.to_torch_dataset(), test_s.to_torch_dataset(), train.weights.shape[1],
                             len(nets.label_names), seed)}


def index_rows(set_folder: Path) -> list[dict]:
    with open(set_folder / "index.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def fidelity(rows: list[dict], names: set[str] | None = None) -> dict:
    """The PSNR (mean, lowest, and the share at 30 dB or more: the goal is each image's) and steps of
    index.csv's rows (those of `names`)."""
    chosen = [r for r in rows if names is None or r["name"] in names]
    psnr = np.array([float(r["psnr"]) for r in chosen])
    return {"mean_psnr": float(np.mean(psnr)), "min_psnr": float(psnr.min()),
            "share_at_30_db": float(np.mean(psnr >= 30.0)),
            "mean_steps": float(np.mean([int(r["steps"]) for r in chosen])),
            "median_steps": float(np.median([int(r["steps"]) for r in chosen])), "networks": len(chosen)}


def fit(images: Path, out: Path, net: dict, recipe: dict, init: str, steps: int) -> float:
    recipe = dict(recipe)
    settings = recipe.pop("settings", None)
    began = time.perf_counter()
    inr_cli.fit_many(images, out, init=init, steps=steps, quiet=True, settings=settings, **net, **recipe)
    return time.perf_counter() - began


def learn_start(images: Path, train_names: list[str], scratch: Path, net: dict, recipe: dict, options: dict) -> tuple:
    from inr_cli.sets.meta_command import meta_init

    listing = scratch / "train.txt"
    listing.write_text("\n".join(str(images / n) for n in train_names) + "\n")
    start = scratch / "start.safetensors"
    recipe = {k: v for k, v in recipe.items() if k not in ("until_psnr", "lr_min")}
    settings, preset = recipe.pop("settings", None), recipe.pop("preset", None)
    config = None
    if settings:  # meta-init takes the keys without a flag through a config file
        config = scratch / "meta.toml"
        config.write_text("".join(f"[{key.split('.')[0]}]\n{key.split('.')[1]} = {value!r}\n"
                                  for key, value in settings.items()))
    began = time.perf_counter()
    learned = meta_init(str(listing), start, {**net, **recipe}, config, preset, options, quiet=True)
    return start, {"seconds": time.perf_counter() - began, "images": learned["images"],
                   "best_outer_step": learned["best_step"], **options,
                   "heldout_psnr_after_k": [round(r["psnr"], 3) for r in learned["log"]]}


def learn_base(images: Path, train_names: list[str], scratch: Path, base_net: dict, options: dict) -> tuple:
    """A base with modulations from `inr meta-init --modulations` on the training split only."""
    from inr_cli.sets.meta_command import meta_init

    listing = scratch / "train.txt"
    listing.write_text("\n".join(str(images / n) for n in train_names) + "\n")
    base = scratch / "base.safetensors"
    began = time.perf_counter()
    learned = meta_init(str(listing), base, base_net, None, None, options, quiet=True)
    return base, {"seconds": time.perf_counter() - began, "images": learned["images"],
                  "best_outer_step": learned["best_step"], **options,
                  "heldout_psnr_after_k": [round(r["psnr"], 3) for r in learned["log"]]}


def side_by_side(images: Path, names: list[str], scratch: Path, net: dict, recipe: dict, base: Path,
                 latent_steps: int, rounds: int) -> dict:
    """Fitting a set of latents against fitting whole networks to the same PSNR, on the same images in
    this run, alternating: the latents' mean training PSNR (raw output, as --until-psnr reads it) is
    the whole networks' --until-psnr (checked every step, at most 1000 steps)."""
    listing = scratch / "side-by-side.txt"
    listing.write_text("\n".join(str(images / n) for n in names) + "\n")
    latents, whole, reached = [], [], []
    for i in range(rounds):
        began = time.perf_counter()
        inr_cli.fit_many(listing, scratch / f"latents-{i}", init=str(base), steps=latent_steps, device=net["device"],
                         quiet=True, **({"gray": True} if recipe.get("gray") else {}), size=net["size"])
        latents.append((time.perf_counter() - began) / len(names))
        rows = index_rows(scratch / f"latents-{i}")
        target = float(np.floor(10 * np.mean([-10 * np.log10(float(r["loss"])) for r in rows])) / 10)
        began = time.perf_counter()
        inr_cli.fit_many(listing, scratch / f"whole-{i}", init="shared", steps=1000, until_psnr=target, log_every=1,
                         quiet=True, **net, **{k: v for k, v in recipe.items() if k != "settings"})
        whole.append((time.perf_counter() - began) / len(names))
        whole_rows = index_rows(scratch / f"whole-{i}")
        reached.append({"target_training_psnr": target, "whole_mean_steps": fidelity(whole_rows)["mean_steps"],
                        "whole_reached": sum(int(r["steps"]) < 1000 for r in whole_rows),
                        "latents_mean_psnr": fidelity(rows)["mean_psnr"],
                        "whole_mean_psnr": fidelity(whole_rows)["mean_psnr"]})
    return {"images": len(names), "rounds": rounds, "latent_s_per_image": latents, "whole_s_per_image": whole,
            "latents_images_per_second_over_whole": float(np.median(whole) / np.median(latents)), "runs": reached}


def recipe_config(images: Path, names: list[str], net: dict, recipe: dict, steps: int) -> tuple:
    """(config, spec, images) of a fit-many call with these settings, as fit-many builds them."""
    from inr_cli.config import SET_PRESETS, build_config, flags_to_values
    from inr_cli.core.network import NetworkSpec
    from inr_cli.core.sizing import fit_to_image
    from inr_cli.formats.data import load_training_data

    flags = {k: v for k, v in recipe.items() if k not in ("preset", "settings", "until_psnr")}
    config = build_config(None, {**flags_to_values({**net, **flags, "steps": steps}), **recipe.get("settings", {})},
                          recipe.get("preset"), SET_PRESETS)
    pictures = [load_training_data(str(images / n), config.data.size, config.data.gray) for n in names]
    config = fit_to_image(config, net["size"], net["size"], pictures[0].n_channels)[0]
    return config, NetworkSpec.from_config(config, pictures[0].n_channels), pictures


def set_mean_start(images: Path, train_names: list[str], path: Path, net: dict, recipe: dict,
                   grey: bool = False) -> Path:
    """The shared draw of the seed with its output biases at the mean colour of the training images
    (at 0.5 where `grey`): one start for every network (a file start keeps its biases), near the
    colours of the set."""
    from inr_cli.core.network import init_parameters
    from inr_cli.formats.export import write_safetensors

    config, spec, pictures = recipe_config(images, train_names, net, recipe, 1)
    mean = np.mean([p.values.reshape(-1, p.n_channels).mean(axis=0, dtype=np.float64) for p in pictures], axis=0)
    mean = np.full_like(mean, 0.5) if grey else mean
    write_safetensors(spec, init_parameters(spec, config.training.seed, mean, config.network.weight_scale),
                      pictures[0].channels, path)
    return path


def against_torch(torch, images: Path, names: list[str], net: dict, recipe: dict, steps: int, rounds: int) -> dict:
    """fit-many against a batched PyTorch SIREN (benchmarks/torch_reference.py: the networks stacked,
    batched matmuls, the same start, schedule and Adam) on the same images, alternating, in this run."""
    from benchmarks.torch_reference import BatchedTorchTrainer, optimizer_settings
    from inr_cli.core.coords import pixel_grid
    from inr_cli.core.metrics import psnr_from_mse
    from inr_cli.core.network import init_networks, output_means
    from inr_cli.sets.plan import shared_output_start

    config, spec, pictures = recipe_config(images, names, net, recipe, steps)
    # fit-many's shared start: its outputs at mid-grey where they would be at each image's mean
    means = output_means(config, pictures)
    if means is not None:
        means = [np.asarray(shared_output_start(spec.out_features))] * len(names)
    start = init_networks(spec, [config.training.seed] * len(names), means, config.network.weight_scale)
    listing = images.parent / f"{images.name}-peer.txt"
    listing.write_text("\n".join(str(images / n) for n in names) + "\n")
    ours, theirs = [], []
    with tempfile.TemporaryDirectory(prefix="inr-peer-") as scratch:
        for i in range(rounds):
            ours.append(fit(listing, Path(scratch) / f"set-{i}", net, recipe, "shared", steps) / len(names))
            ours_loss = float(np.mean([float(r["loss"]) for r in index_rows(Path(scratch) / f"set-{i}")]))
            began = time.perf_counter()
            opt = config.optimizer
            trainer = BatchedTorchTrainer(torch, spec, start, pixel_grid(net["size"], net["size"]),
                                          np.stack([p.targets() for p in pictures]), opt.lr, opt.lr_min, steps,
                                          "cpu", **optimizer_settings(opt))
            for _ in range(steps):
                trainer.step()
            losses = trainer.read_loss()
            theirs.append((time.perf_counter() - began) / len(names))
    return {"images": len(names), "steps": steps, "rounds": rounds, "fit_many_s_per_image": ours,
            "torch_s_per_image": theirs, "fit_many_over_torch": float(np.median(ours) / np.median(theirs)),
            "fit_many_training_psnr": psnr_from_mse(ours_loss),
            "torch_training_psnr": psnr_from_mse(float(losses.mean())),
            "torch_threads": torch.get_num_threads()}


def latents_row(args, torch, images: Path, root: Path, dataset: str, scratch: Path, net: dict, recipe: dict,
                groups: dict, train: list[str], test: list[str], by_group: dict | None, row: dict) -> dict:
    """A base learned on the training split, every image's latent fitted over it, the probes on the
    latents; held-out PSNRs at other step counts; the side-by-side speed against whole networks."""
    base_net = {"hidden": args.base_hidden or args.hidden, "layers": args.base_layers or args.layers,
                "size": args.size, "device": args.device, "seed": args.seed,
                **({"gray": True} if recipe.get("gray") else {})}
    if args.base_omega0:
        base_net["omega0"] = args.base_omega0
    options = dict(outer_steps=args.base_outer_steps, inner_steps=args.base_inner_steps, meta_batch=args.base_batch,
                   holdout=0.1, eval_every=max(1, args.base_outer_steps // 10), modulations=args.modulations,
                   meta_sgd=not args.no_meta_sgd, outer_lr=args.base_outer_lr)
    base, row["meta_init"] = learn_base(images, train, scratch, base_net, options)
    row.update(base={k: base_net[k] for k in ("hidden", "layers")} | {"omega0": base_net.get("omega0", "preset"),
                                                                      "latent": args.modulations})
    steps = [s or args.base_inner_steps for s in args.latent_steps]
    row["steps"] = steps[0]
    began = time.perf_counter()
    inr_cli.fit_many(images, scratch / "set", init=str(base), steps=steps[0], quiet=True, device=args.device,
                     size=args.size, **({"gray": True} if recipe.get("gray") else {}))
    seconds = time.perf_counter() - began
    rows = index_rows(scratch / "set")
    row.update({"seconds_per_image": seconds / len(rows), "held_out": fidelity(rows, set(test)),
                "training": fidelity(rows, set(train)),
                "accuracy": from_weights(torch, scratch / "set", by_group, test, args.seed)})
    listing = scratch / "test.txt"
    listing.write_text("\n".join(str(images / n) for n in test) + "\n")
    for count in steps[1:]:
        inr_cli.fit_many(listing, scratch / f"test-{count}", init=str(base), steps=count, quiet=True,
                         device=args.device, size=args.size, **({"gray": True} if recipe.get("gray") else {}))
        row.setdefault("held_out_at", {})[str(count)] = fidelity(index_rows(scratch / f"test-{count}"))
    if args.side_by_side:
        row["side_by_side"] = side_by_side(images, train[:args.side_by_side], scratch, net, recipe, base, steps[0], 3)
    print(f"{dataset} latents {args.modulations} over {base_net['layers']}x{base_net['hidden']}: held-out PSNR "
          f"{row['held_out']['mean_psnr']:.2f} dB in {steps[0]} steps, {row['seconds_per_image'] * 1000:.1f} ms/image, "
          f"accuracy linear {row['accuracy']['linear']:.3f} MLP {row['accuracy']['mlp']:.3f}"
          + "".join(f"; {k} steps: {v['mean_psnr']:.2f} dB" for k, v in row.get("held_out_at", {}).items())
          + (f"; {row['side_by_side']['latents_images_per_second_over_whole']:.1f}x the images per second of whole "
             f"networks" if "side_by_side" in row else ""), flush=True)
    return row


def keep_row(results: dict, row: dict, path: Path) -> None:
    """The row in the results file, in place of an earlier one of the same data set, recipe and start."""
    key = (row["dataset"], row["recipe"], row["start"])
    results["rows"] = [r for r in results["rows"] if (r["dataset"], r["recipe"], r["start"]) != key] + [row]
    save_json(results, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=list(DATASETS), default=DEFAULT_DATASETS)
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=["default"])
    parser.add_argument("--starts", nargs="+", choices=("random", "shared", "set-mean", "grey", "learned", "latents"),
                        default=["shared"], help="set-mean: the shared draw, its outputs at the training images' "
                        "mean colour (grey: at 0.5)")
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--limit", type=int, default=None, help="fonts / tiles per photo / digits per class "
                        "(default: all fonts, all tiles, 60 digits)")
    parser.add_argument("--learned-steps", type=int, nargs="*", default=[],
                        help="also fit the held-out images from the learned start for these many steps")
    parser.add_argument("--outer-steps", type=int, default=500)
    parser.add_argument("--inner-steps", type=int, default=32)
    parser.add_argument("--outer-lr", type=float, default=1.0)
    parser.add_argument("--modulations", type=int, default=64, help="latents: the numbers per image")
    parser.add_argument("--base-hidden", type=int, default=None, help="latents: the base's width (default --hidden)")
    parser.add_argument("--base-layers", type=int, default=None, help="latents: the base's depth (default --layers)")
    parser.add_argument("--base-omega0", type=float, default=None, help="latents: the base's omega0 (default the "
                        "preset's)")
    parser.add_argument("--base-outer-steps", type=int, default=1000)
    parser.add_argument("--base-inner-steps", type=int, default=3)
    parser.add_argument("--base-outer-lr", type=float, default=None)
    parser.add_argument("--base-batch", type=int, default=8)
    parser.add_argument("--no-meta-sgd", action="store_true", help="latents: the rates held at --inner-lr")
    parser.add_argument("--latent-steps", type=int, nargs="+", default=[0], help="latents: fit-many --steps (0: the "
                        "base's inner steps); the first is the set the probes learn from, the others held-out PSNRs")
    parser.add_argument("--side-by-side", type=int, default=0, help="latents: time their fit against whole networks "
                        "to the same PSNR on this many training images (0: not)")
    parser.add_argument("--peer", type=int, default=0, help="time fit-many against a batched PyTorch SIREN on "
                        "this many training images of the first data set, with the first recipe (0: not)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="where every set is fitted and every base learned")
    parser.add_argument("--data", type=Path, default=None, help="make (or reuse) the data sets here")
    parser.add_argument("--name", default="weights-suite-cpu-32")
    parser.add_argument("--out", type=Path, default=None, help="the results file (default: results/NAME.json)")
    args = parser.parse_args()
    import torch

    net = {"hidden": args.hidden, "layers": args.layers, "size": args.size, "device": args.device, "seed": args.seed}
    path = args.out or RESULTS / f"{args.name}.json"
    results = json.loads(path.read_text()) if path.exists() else {"rows": [], "pixels": {}}
    results.update({"environment": environment(), "settings": {k: str(v) for k, v in vars(args).items()}})
    keep = tempfile.TemporaryDirectory(prefix="inr-suite-")
    root = (args.data or Path(keep.name)).resolve()  # list files name the images by their whole path
    for dataset in args.datasets:
        images = root / dataset
        groups, gray = made_or_kept(dataset, root, args.size, args.limit)
        train, test = split_names(sorted(groups), groups, dataset in GROUPED, args.seed)
        by_group = groups if dataset in GROUPED else None
        if dataset not in results["pixels"]:
            results["pixels"][dataset] = {**from_pixels(torch, images, train, test, args.seed, gray),
                                          "train": len(train), "test": len(test)}
            print(f"{dataset}: {len(train)} training / {len(test)} held-out images; from the pixels: "
                  f"{results['pixels'][dataset]}", flush=True)
        for recipe_name in args.recipes:
            recipe = {**RECIPES[recipe_name], **({"gray": True} if gray else {})}
            for start in args.starts:
                scratch = Path(tempfile.mkdtemp(prefix=f"{dataset}-{recipe_name}-{start}-", dir=keep.name))
                row = {"dataset": dataset, "recipe": recipe_name, "start": start, "steps": args.steps}
                init = start
                if start == "latents":
                    keep_row(results, latents_row(args, torch, images, root, dataset, scratch, net, recipe, groups,
                                                  train, test, by_group, row), path)
                    continue
                if start == "learned":
                    options = dict(outer_steps=args.outer_steps, inner_steps=args.inner_steps, meta_batch=8,
                                   outer_lr=args.outer_lr, holdout=0.1, eval_every=25)
                    init, row["meta_init"] = learn_start(images, train, scratch, net, recipe, options)
                    init = str(init)
                elif start in ("set-mean", "grey"):
                    init = str(set_mean_start(images, train, scratch / "start.safetensors", net, recipe,
                                              grey=start == "grey"))
                try:
                    seconds = fit(images, scratch / "set", net, recipe, init, args.steps)
                except inr_cli.InrError as exc:  # a recipe that learns nothing on some images: said, not fatal
                    row["error"] = str(exc)
                    print(f"{dataset} {recipe_name} {start}: {exc}", flush=True)
                    keep_row(results, row, path)
                    continue
                rows = index_rows(scratch / "set")
                row.update({"seconds_per_image": seconds / len(rows), "held_out": fidelity(rows, set(test)),
                            "training": fidelity(rows, set(train)),
                            "accuracy": from_weights(torch, scratch / "set", by_group, test, args.seed)})
                if start != "random":
                    for steps in args.learned_steps:
                        listing = scratch / "test.txt"
                        listing.write_text("\n".join(str(images / n) for n in test) + "\n")
                        fit(listing, scratch / f"test-{steps}", net, recipe, init, steps)
                        row.setdefault("held_out_at", {})[str(steps)] = fidelity(index_rows(scratch / f"test-{steps}"))
                print(f"{dataset} {recipe_name} {start}: held-out PSNR {row['held_out']['mean_psnr']:.2f} dB, "
                      f"steps {row['held_out']['mean_steps']:.0f}, {row['seconds_per_image'] * 1000:.0f} ms/image, "
                      f"accuracy linear {row['accuracy']['linear']:.3f} MLP {row['accuracy']['mlp']:.3f}"
                      + "".join(f"; {k} steps: {v['mean_psnr']:.2f} dB" for k, v in row.get("held_out_at", {}).items()),
                      flush=True)
                keep_row(results, row, path)
        if args.peer and dataset == args.datasets[0]:
            recipe = {**RECIPES[args.recipes[0]], **({"gray": True} if gray else {})}
            results["peer"] = {"dataset": dataset, "recipe": args.recipes[0], **against_torch(
                torch, images, train[:args.peer], net, recipe, args.steps, 3)}
            print(f"against batched PyTorch: {results['peer']}", flush=True)
            save_json(results, path)
    print(f"-> {path}")
    keep.cleanup()


if __name__ == "__main__":
    main()
