"""Every setting of a training run, defined once.

A Setting holds all that belongs to one key of the configuration: its section and name, type,
bounds, default, help text, flag, the commands that take it and whether it changes what is fitted.
config.py builds the configuration classes, the TOML reading and the validation from SETTINGS; the
`train` and `fit-many` commands get their flags from it (commands/setting_options.py); the table of
training options in docs/training.md is rendered from it (markdown_table). Adding a setting is adding one
Setting below.

Defaults: a Setting's default is what a run gets unless a preset (configs/NAME.toml), a --config
file or the command line says otherwise; the presets hold only what they tune.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from inr_cli.limits import (
    MAX_LAYERS,
    MAX_LEVEL_FEATURES,
    MAX_LEVELS,
    MAX_LOG2_TABLE_SIZE,
    MAX_RESOLUTION,
    MAX_SEED,
    MAX_WIDTH,
)

# The choices, as types: the command line lists them in --help and completes them.
Model = Literal["siren", "sigmoid", "relu"]
Encoding = Literal["none", "fourier", "hashgrid"]
Optimizer = Literal["adam", "sgd"]
Device = Literal["auto", "cpu", "gpu"]
Matmul = Literal["kernel", "cublas"]
Precision = Literal["fp32", "tf32"]
Dtype = Literal["float32", "float16"]
MODELS, ENCODINGS, OPTIMIZERS = get_args(Model), get_args(Encoding), get_args(Optimizer)
DEVICES, MATMULS, PRECISIONS, DTYPES = get_args(Device), get_args(Matmul), get_args(Precision), get_args(Dtype)

TRAIN, FIT_MANY, META_INIT = "train", "fit-many", "meta-init"
# meta-init fits as fit-many does, but for a fit's length and schedule (its inner fits last
# --inner-steps at the peak rate held) and its checkpoints (at each held-out measure).
FITS = (TRAIN, FIT_MANY, META_INIT)
POSITIVE, NON_NEGATIVE = "positive", "non-negative"
NO_LEGACY = object()  # a key that checkpoints have held since they were first written
# Where a setting does anything (Setting.applies), in the words of a refusal: "does nothing but ...".
FOURIER, HASH_GRID, SINE, SIGMOID_OUTPUT = "fourier", "hashgrid", "sine", "sigmoid output"
FILE_START, DRAWN_START, ADAM, SGD = "file start", "drawn start", "adam", "sgd"
APPLIES = {FOURIER: "with Fourier features (--encoding fourier)",
           HASH_GRID: "with a hash grid (--encoding hashgrid)",
           SINE: "in a network of sine layers (--model siren)",
           SIGMOID_OUTPUT: "where the model's output is a sigmoid (--model relu or sigmoid)",
           FILE_START: "with a file start (--init PATH), or in meta-init",
           DRAWN_START: "with a drawn start (--init random or shared): a file start keeps its own",
           ADAM: "with Adam (--optimizer adam)",
           SGD: "with SGD (--optimizer sgd)"}


@dataclass(frozen=True)
class Setting:
    key: str  # "section.field", as in the TOML files
    type: type  # int | float | str | bool
    default: object
    help: str  # one sentence for --help and the options table
    name: str = ""  # the flag (--fourier-sigma for fourier_sigma) and checkpoint format 1's field; "": the field
    choices: tuple = ()
    bound: str | None = None  # POSITIVE | NON_NEGATIVE
    flag_bound: str | None = None  # a stricter bound for the flag, where 0 means something only a file would say
    most: int | None = None  # the largest value inr handles (limits.py): its readers hold files to it too
    fits: bool = True  # changes what is fitted; False: a resumed run or a fit-many rerun may change it
    commands: tuple = FITS  # the commands that take it, as a flag and through --set
    flag: bool = True  # False: set through --set or a --config file only
    legacy: object = NO_LEGACY  # for a key added later: the value that does what runs saved before it did
    values: str = ""  # how the flag's value is written when it is not only one of choices (random|shared|PATH)
    applies: str = ""  # where it does anything (a key of APPLIES); given where it does nothing, it is refused

    def __post_init__(self):
        if not self.name:
            object.__setattr__(self, "name", self.field)

    @property
    def section(self) -> str:
        return self.key.split(".")[0]

    @property
    def field(self) -> str:
        return self.key.split(".")[1]

    @property
    def option(self) -> str:
        """The flag as typed: --lr-min."""
        return "--" + self.name.replace("_", "-")

    @property
    def spelled(self) -> str:
        """As a message names it: the flag and the TOML key (--hash-max-res / encoding.max_resolution),
        the key alone where it has no flag."""
        return f"{self.option} ({self.key})" if self.flag else self.key

    @property
    def metavar(self) -> str:
        if self.values:
            return self.values
        if self.choices:
            return "|".join(self.choices)
        return {int: "N", float: "F", str: "TEXT", bool: ""}[self.type]


SETTINGS = (
    Setting("network.model", str, "siren", "Network: sine hidden layers (siren), sigmoid everywhere (sigmoid) or "
            "ReLU hidden layers with a sigmoid output (relu); the model picks the preset", choices=MODELS),
    Setting("network.hidden", int, 256, "Neurons per hidden layer", bound=POSITIVE, most=MAX_WIDTH),
    Setting("network.layers", int, 3, "Number of hidden layers", bound=POSITIVE, most=MAX_LAYERS),
    Setting("network.omega0", float, 0.0, "SIREN frequency omega_0; 0 = from the image's size (0.3 per pixel of "
            "its longer side, 15 to 60)", bound=NON_NEGATIVE, applies=SINE),
    Setting("network.weight_scale", float, 1.0, "Multiply every initial weight but the output layer's by this "
            "(weight scaling, Yeom et al. 2024): fewer steps to a sharp fit, at a cost between the pixels above 1.5",
            bound=POSITIVE, legacy=1.0),
    Setting("network.linear_output", bool, False, "A linear output layer (the render clips it to [0, 1]) in place "
            "of the relu and sigmoid models' sigmoid, which a white sky or page can drive into saturation, where it "
            "stops learning (siren's is linear already)", legacy=False, applies=SIGMOID_OUTPUT),
    Setting("network.max_bytes", str, "", "The most bytes the network's parameters may take, stored as --dtype "
            "says: 500k, 1.5M, 2MiB, or image (the training image's 8-bit bytes); the budget sizes the hash grid's "
            "tables, or the hidden width (and the Fourier features) of any other network; empty = none (a hash grid "
            "is then sized to the image's bytes)", values="BYTES|image", legacy=""),
    Setting("network.dtype", str, "float32", "What the network's parameters are stored in: a finished run's "
            "checkpoint and the exports (float16: half the bytes, so a byte budget holds twice the parameters); "
            "training and drawing run in float32 either way", choices=DTYPES, legacy="float32", commands=(TRAIN,)),
    Setting("network.init_output_at_mean", bool, True, "Start the output biases at the image's mean colour "
            "(the logit of it for a sigmoid output; fit-many's shared start: at mid-grey, one start for every "
            "network); a file start (--init PATH) keeps its own", legacy=False, applies=DRAWN_START),
    Setting("network.start_output_at_mean", bool, False, "Set a file start's output biases (--init PATH) to each "
            "image's mean colour, where it otherwise keeps its own (meta-init: each inner fit starts so, learning a "
            "start for fits that do)", legacy=False, applies=FILE_START),
    Setting("encoding.name", str, "none", "Coordinates as they are (none), Gaussian Fourier features "
            "cos/sin(2 pi B x), B ~ N(0, sigma^2) (fourier), or a trained multiresolution hash grid (hashgrid, "
            "Mueller et al. 2022)", name="encoding", choices=ENCODINGS),
    Setting("encoding.features", int, 256, "Fourier mapping size m: the network sees 2m inputs",
            name="fourier_features", bound=POSITIVE, most=MAX_WIDTH, applies=FOURIER),
    Setting("encoding.sigma", float, 6.0, "Spread of the Fourier frequencies; 0 = from the image's size (0.027 "
            "per pixel of its longer side, 2 to 10)", name="fourier_sigma", bound=NON_NEGATIVE, applies=FOURIER),
    Setting("encoding.levels", int, 0, "Hash grid: levels of the grid, coarsest to finest; 0 = from the image (32 "
            "under 256 px; else 16 where the byte budget holds them whole, 8 where it hashes them)", name="hash_levels",
            bound=NON_NEGATIVE, most=MAX_LEVELS, legacy=16, applies=HASH_GRID),
    Setting("encoding.level_features", int, 2, "Hash grid: trained features per level (the network sees levels x "
            "features inputs)", name="hash_features", bound=POSITIVE, most=MAX_LEVEL_FEATURES, legacy=2,
            applies=HASH_GRID),
    Setting("encoding.log2_table_size", float, 0.0, "Hash grid: log2 of the entries of each level's table (a level "
            "with fewer vertices is stored dense, a finer one hashed into the table); 0 = sized to the byte budget "
            "(--max-bytes; by default the image's 8-bit bytes)",
            name="hash_log2_size", bound=NON_NEGATIVE, most=MAX_LOG2_TABLE_SIZE, legacy=19.0,
            applies=HASH_GRID),
    Setting("encoding.min_resolution", int, 16, "Hash grid: cells across the coarsest level", name="hash_min_res",
            bound=POSITIVE, most=MAX_RESOLUTION, legacy=16, applies=HASH_GRID),
    Setting("encoding.max_resolution", int, 0, "Hash grid: cells across the finest level; 0 = from the image's "
            "size (its longer side: one cell a pixel)", name="hash_max_res", bound=NON_NEGATIVE, most=MAX_RESOLUTION,
            legacy=0, applies=HASH_GRID),
    Setting("optimizer.name", str, "adam", "Adam (PyTorch's formula) or SGD with momentum", name="optimizer",
            choices=OPTIMIZERS),
    Setting("optimizer.lr", float, 4e-4, "Peak learning rate, cosine-annealed to lr_min over the whole budget",
            bound=POSITIVE),
    Setting("optimizer.lr_min", float, 1e-5, "Final learning rate of the cosine schedule", bound=NON_NEGATIVE,
            commands=(TRAIN, FIT_MANY)),
    Setting("optimizer.warmup", int, 0, "Steps of linear warm-up to lr before the cosine; 0 = none",
            bound=NON_NEGATIVE, legacy=0, commands=(TRAIN, FIT_MANY)),
    Setting("optimizer.beta1", float, 0.9, "Adam's first-moment decay", bound=POSITIVE, flag=False, applies=ADAM),
    Setting("optimizer.beta2", float, 0.999, "Adam's second-moment decay", bound=POSITIVE, flag=False, applies=ADAM),
    Setting("optimizer.eps", float, 1e-8, "Adam's epsilon", bound=POSITIVE, flag=False, applies=ADAM),
    Setting("optimizer.momentum", float, 0.9, "SGD's momentum", bound=NON_NEGATIVE, flag=False, applies=SGD),
    Setting("training.steps", int, 1000, "Total steps (fit-many: per network; train --resume: the run's new "
            "total, above the step it reached)", bound=POSITIVE, commands=(TRAIN, FIT_MANY)),
    Setting("training.batch_size", int, 0, "Random pixels per step; 0 = every pixel every step",
            bound=NON_NEGATIVE),
    Setting("training.seed", int, 0, "Seed of the initialisation and mini-batches (fit-many: each image's "
            "seed comes from it and the image's name)", bound=NON_NEGATIVE, most=MAX_SEED),
    Setting("training.init", str, "shared", "Where the networks start: each from its own seed's draw (random), "
            "all from one draw of --seed (shared: what makes a set's weights comparable; for one network the same "
            "as random), or from the weights of a run, checkpoint or .safetensors start (PATH, e.g. from inr "
            "meta-init; its network must be the one fitted)", name="init", values="random|shared|PATH",
            legacy="random"),
    Setting("training.target_psnr", float, 0.0, "Stop when the training PSNR (of the loss: the output before "
            "its clip to [0, 1]; index.csv's psnr, of the clipped render, is never lower) reaches this many dB, "
            "checked at each loss read (fit-many: each network stops on its own); --steps stays the ceiling; 0 = off",
            name="until_psnr", bound=NON_NEGATIVE, legacy=0.0, commands=(TRAIN, FIT_MANY)),
    Setting("training.checkpoint_every", int, 250, "Steps between checkpoints", bound=POSITIVE, fits=False,
            commands=(TRAIN,)),
    Setting("training.log_every", int, 10, "Steps between loss reads and metrics rows", bound=POSITIVE,
            fits=False, commands=(TRAIN, FIT_MANY)),
    Setting("training.checkpoint_seconds", float, 60.0, "Also write a checkpoint when this many seconds have "
            "passed since the last one; 0 = off", bound=NON_NEGATIVE, fits=False, legacy=0.0,
            commands=(TRAIN, FIT_MANY)),
    Setting("training.preview_every", int, 250, "Steps between preview images; 0 = none", bound=NON_NEGATIVE,
            fits=False, commands=(TRAIN,)),
    Setting("training.device", str, "auto", "Where to train: auto uses the GPU when CuPy finds one",
            choices=DEVICES, fits=False),
    Setting("training.matmul", str, "kernel", "GPU matmul: our kernel, or cuBLAS for comparison",
            choices=MATMULS, fits=False),
    Setting("training.precision", str, "fp32", "GPU layer products: FP32, or TF32 on tensor cores (operands rounded "
            "to 10 mantissa bits, sums in FP32; the products over the coordinates stay FP32)", choices=PRECISIONS,
            legacy="fp32"),
    Setting("training.fused_network", bool, True, "On the GPU, train a network whose hidden layers are at most 128 "
            "wide in two fused kernels a step, its activations kept on chip between layers (off: a kernel per layer, "
            "for comparison)", fits=False, legacy=True),  # fits what runs saved before it fitted
    Setting("training.cuda_graph", bool, True, "Replay the GPU step as a CUDA graph (off: launch kernels one "
            "by one)", fits=False),
    Setting("data.source", str, "", "Image, pixel CSV or .npy array; empty = the built-in sample; train's DATA "
            "argument sets it", commands=(TRAIN,), flag=False),
    Setting("data.size", int, 0, "Resize images so the longer side is N (fit-many, meta-init: only the images larger "
            "than N; train also enlarges a smaller one, with a note); 0 (in a config file) = as is",
            bound=NON_NEGATIVE, flag_bound=POSITIVE),
    Setting("data.gray", bool, False, "Train on one grey channel"),
)

BY_KEY = {s.key: s for s in SETTINGS}
BY_NAME = {s.name: s for s in SETTINGS}
DEFAULTS = {s.key: s.default for s in SETTINGS}
# Keys added after checkpoints were first written, with the value that does what those runs did.
ADDED_KEYS = {s.key: s.legacy for s in SETTINGS if s.legacy is not NO_LEGACY}
# What `inr train --resume` may change (by flag name): what does not change the fit, and the budget
# (steps, target PSNR), which a resumed run extends.
RESUMABLE = {s.name for s in SETTINGS if not s.fits} | {"steps", "until_psnr"}
# What a rerun of fit-many may change: what does not change the fit, and where the folder is.
FIT_MANY_FREE_KEYS = {s.key for s in SETTINGS if not s.fits} | {"data.source"}
# The hash grid's own settings: a network without a hash grid does not depend on them.
HASH_GRID_KEYS = {s.key for s in SETTINGS if s.name.startswith("hash_")}


def for_command(command: str) -> list[Setting]:
    return [s for s in SETTINGS if command in s.commands]


def format_value(value) -> str:
    """A value as a TOML file writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def default_text(setting: Setting, presets: dict[str, dict]) -> str:
    """The default, and each preset's own value where it differs: `256; sigmoid: 128`."""
    tuned: dict[str, list[str]] = {}
    for preset, values in presets.items():
        if setting.key in values and values[setting.key] != setting.default:
            tuned.setdefault(_short(values[setting.key]), []).append(preset)
    own_values = [f"{', '.join(names)}: {value}" for value, names in tuned.items()]
    return "; ".join([_short(setting.default)] + own_values)


def _short(value) -> str:
    return "`" + (format_value(value) if isinstance(value, (bool, str)) else f"{value:g}") + "`"


def markdown_table(presets: dict[str, dict]) -> str:
    """The table of training options (docs/training.md): one row per setting."""
    rows = ["| flag | key (`--set`, `--config`) | meaning | default; presets' own values |",
            "| --- | --- | --- | --- |"]
    for s in SETTINGS:
        if not s.flag:
            flag = ""
        elif s.type is bool:
            flag = f"`{s.option}`, `--no-{s.option[2:]}`"
        else:
            flag = f"`{s.option} {s.metavar}`".replace("|", "\\|")
        only = "" if s.commands == FITS else f" ({' and '.join(s.commands) or 'no command'} only)"
        rows.append(f"| {flag} | `{s.key}` | {s.help}{only} | {default_text(s, presets)} |")
    return "\n".join(rows) + "\n"
