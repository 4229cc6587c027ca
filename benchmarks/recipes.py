"""The training recipes that benchmarks/time_to_quality.py puts side by side, each from its paper.

A recipe is a preset and the flags that change it (as benchmarks.common.configure takes them),
plus `batch_fraction`: random batches of that share of the pixels (0: every pixel every step).
What the papers claim, in short (BENCHMARKS.md has the longer story and what they did here):

- SIREN (Sitzmann et al. 2020): sin(omega0 (W x + b)), omega0 30, first layer U(±1/in), later
  layers U(±sqrt(6/in)/omega0); Adam, lr 1e-4, constant, PyTorch's betas (0.9, 0.999).
- Adam's beta2: 0.99 in tiny-cuda-nn's and instant-ngp's configurations (Müller et al. 2022),
  0.999 in PyTorch's default; a shorter memory of the squared gradients adapts each weight's step
  sooner. inr's siren preset takes 0.99.
- The output at the image's mean colour (inr's network.init_output_at_mean, from its sigmoid preset,
  issue "draw well at every size"): the last layer's biases start at the mean instead of 0, so the
  first steps need not carry a white page's 1.0 through every weight. inr's siren preset takes it.
- Learning-rate warm-up (Goyal et al. 2017 for SGD; for Adam, Liu et al., ICLR 2020, "On the
  Variance of the Adaptive Learning Rate and Beyond"): a linear rise over the first steps, while
  Adam's second-moment estimate rests on few gradients and its step sizes vary most; claimed to
  stabilise training and allow higher rates. inr's `optimizer.warmup`.
- Weight scaling (Yeom, Lee & Lee, ICLR 2025, "Fast Training of Sinusoidal Neural Fields via
  Scaling Initialization"): multiply every weight of the SIREN init but the last layer's by a
  constant alpha; claims up to 10x faster training at the same generalisation for a moderate
  alpha, a "sweet spot" that trades speed against noise between samples as alpha grows. Their
  image code (effl-lab/Fast-Neural-Fields, ICLR2025/weight_scaling.py): alpha 2.5, omega0 30,
  Adam 1e-4 constant, biases left at PyTorch's draw.
- Fourier features (Tancik et al. 2020): [cos(2 pi B x), sin(2 pi B x)], B ~ N(0, sigma^2), then
  a ReLU MLP: inr's fourier preset.
- The sigmoid preset: the original system's sigmoid MLP on Fourier features.
- The hash grid (Müller, Evans, Schied, Keller 2022, "Instant Neural Graphics Primitives"): L levels
  of trained feature tables, dense where a level fits, spatially hashed beyond, bilinearly
  interpolated and fed to a ReLU 2x64; Adam beta2 0.99, epsilon 1e-15. inr's hashgrid preset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inr_cli.core.sizing import OMEGA0_PER_PIXEL, OMEGA0_RANGE, chosen

WS_FACTORS = (1.5, 2.0, 2.5, 3.0)
SIGMOID_WS_FACTORS = (1.5, 2.0, 3.0, 5.0, 7.0)
# lr_min = lr: a constant learning rate; the output starts at 0, as PyTorch's nn.Linear draws it.
PAPER = {"omega0": 30.0, "lr": 1e-4, "lr_min": 1e-4, "beta2": 0.999, "init_output_at_mean": False}


@dataclass(frozen=True)
class Recipe:
    preset: str
    flags: dict = field(default_factory=dict)
    about: str = ""
    batch_fraction: float = 0.0  # 0: every pixel every step
    # Another omega0 rule than inr's (core/sizing.py): (per pixel of the longer side, lowest, highest)
    omega0_rule: tuple | None = None

    def omega0_for(self, longer: int) -> float | None:
        if self.omega0_rule is None:
            return None
        per_pixel, low, high = self.omega0_rule
        return chosen(per_pixel, (low, high), longer)


def _factor(f: float) -> str:
    return f"{f:g}"


RECIPES: dict[str, Recipe] = {
    "siren-paper": Recipe("siren", dict(PAPER), "SIREN as published: omega0 30, Adam 1e-4 constant"),
    "default": Recipe("siren", {}, "inr's siren preset: omega0 from the size, output at the mean colour, Adam 4e-4 "
                                   "(beta2 0.99) cosine to 1e-5"),
    "before": Recipe("siren", {"lr": 3e-4, "beta2": 0.999, "init_output_at_mean": False},
                     "the siren preset until 2026-11-25: output at 0, Adam 3e-4 with PyTorch's beta2 0.999"),
    "output-at-0": Recipe("siren", {"init_output_at_mean": False},
                          "inr's default with the output started at 0 (the siren preset of 2026-11-25 morning)"),
    "lr3e-4": Recipe("siren", {"lr": 3e-4}, "the siren preset of 2026-11-25 afternoon: Adam 3e-4"),
    "lr5e-4": Recipe("siren", {"lr": 5e-4}, "inr's default at Adam 5e-4"),
    "beta2-0.9": Recipe("siren", {"beta2": 0.9}, "inr's default with Adam's beta2 at 0.9"),
    **{f"ws{_factor(f)}-paper": Recipe("siren", {"weight_scale": f, **PAPER},
                                       f"weight scaling x{_factor(f)} on the paper's recipe (omega0 30, 1e-4 constant)")
       for f in WS_FACTORS},
    **{f"ws{_factor(f)}-cosine": Recipe("siren", {"weight_scale": f},
                                        f"weight scaling x{_factor(f)} on inr's default (omega0 from the size, "
                                        f"4e-4 cosine)")
       for f in WS_FACTORS},
    # Found on the way (time-to-quality-cpu-64-explore.json, -128.json): the gentler trade-offs.
    "ws1.25-cosine": Recipe("siren", {"weight_scale": 1.25}, "weight scaling x1.25 on inr's default"),
    "ws1.5-rule0.2-lr4.5e-4": Recipe("siren", {"weight_scale": 1.5, "lr": 4.5e-4},
                                     "weight scaling x1.5, omega0 0.2 per pixel (10 to 60), Adam 4.5e-4 cosine",
                                     omega0_rule=(0.2, 10.0, 60.0)),
    "lr6e-4-beta2-0.999": Recipe("siren", {"lr": 6e-4, "beta2": 0.999}, "the siren preset before beta2 0.99, at twice "
                                                                         "its learning rate (6e-4 cosine)"),
    "default-constant": Recipe("siren", {"lr_min": 4e-4}, "inr's default with a constant 4e-4"),
    "paper-cosine": Recipe("siren", {"omega0": 30.0, "lr": 1e-4, "lr_min": 1e-6, "init_output_at_mean": False},
                           "the paper's omega0 and lr, cosine-annealed to 1e-6"),
    # Warm-up and the higher rates it is meant to allow (time-to-quality-cpu-64-warmup.json).
    "warmup50": Recipe("siren", {"warmup": 50}, "inr's default after a 50-step linear warm-up"),
    "warmup50-lr8e-4": Recipe("siren", {"warmup": 50, "lr": 8e-4}, "a 50-step warm-up to 8e-4, then cosine"),
    "warmup50-lr1e-3": Recipe("siren", {"warmup": 50, "lr": 1e-3}, "a 50-step warm-up to 1e-3, then cosine"),
    "warmup20-lr6e-4": Recipe("siren", {"warmup": 20, "lr": 6e-4}, "a 20-step warm-up to 6e-4, then cosine"),
    "warmup100-lr1.5e-3": Recipe("siren", {"warmup": 100, "lr": 1.5e-3}, "a 100-step warm-up to 1.5e-3, then cosine"),
    "default-quarter": Recipe("siren", {}, "inr's default on random batches of a quarter of the pixels",
                              batch_fraction=0.25),
    "ws2-paper-quarter": Recipe("siren", {"weight_scale": 2.0, **PAPER},
                                "weight scaling x2, paper's recipe, random batches of a quarter of the pixels",
                                batch_fraction=0.25),
    "fourier": Recipe("fourier", {}, "inr's fourier preset: ReLU MLP on Fourier features, sigma 6, 3e-3 cosine"),
    "sigmoid": Recipe("sigmoid", {}, "inr's sigmoid preset: sigmoid MLP on Fourier features, 3e-3 cosine"),
    "hashgrid": Recipe("hashgrid", {}, "inr's hashgrid preset: a trained multiresolution hash grid (Mueller et al. "
                                       "2022) in front of a ReLU 2x64, random batches of 2^18 pixels"),
    **{f"sigmoid-ws{_factor(f)}": Recipe("sigmoid", {"weight_scale": f},
                                         f"the sigmoid preset, Glorot weights x{_factor(f)} but the output layer's")
       for f in SIGMOID_WS_FACTORS},
}

GROUPS = {  # named apart from the recipes: a name is a recipe or a group, never both
    "all": list(RECIPES),
    # The default: "all" less what the first CPU run showed to be the same as another recipe within
    # the targets (default-constant, paper-cosine) or a step further down a losing road (x2.5).
    "suite": [name for name in RECIPES if name not in ("default-constant", "paper-cosine", "ws2.5-paper",
                                                        "ws2.5-cosine", "sigmoid-ws1.5", "sigmoid-ws2")],
    "sirens": [name for name, r in RECIPES.items() if r.preset == "siren"],
    "sigmoids": [name for name, r in RECIPES.items() if r.preset == "sigmoid"],
    "core": ["siren-paper", "default", "ws2-paper", "ws2.5-paper", "ws2-cosine", "fourier", "sigmoid"],
}
assert not set(GROUPS) & set(RECIPES)


def parse_definition(text: str) -> tuple[str, Recipe]:
    """`NAME=PRESET:key=value,key=value` as a recipe, for exploring around the table above without
    editing it. Besides the flags: batch_fraction, and omega0_per_pixel / omega0_min / omega0_max for
    another omega0 rule (inr's limits where one is not given)."""
    name, _, rest = text.partition("=")
    preset, _, pairs = rest.partition(":")
    if not name or not preset:
        raise ValueError(f"{text!r}: expected NAME=PRESET:key=value,...")
    flags = {}
    for pair in filter(None, pairs.split(",")):
        key, _, value = pair.partition("=")
        flags[key.strip().replace("-", "_")] = _number(value.strip())
    fraction = float(flags.pop("batch_fraction", 0.0))
    rule = None
    if {"omega0_per_pixel", "omega0_min", "omega0_max"} & set(flags):
        rule = (float(flags.pop("omega0_per_pixel", OMEGA0_PER_PIXEL)), float(flags.pop("omega0_min", OMEGA0_RANGE[0])),
                float(flags.pop("omega0_max", OMEGA0_RANGE[1])))
    return name, Recipe(preset, flags, f"defined on the command line: {rest}", fraction, rule)


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def select(names: list[str], defined: dict[str, Recipe]) -> dict[str, Recipe]:
    """The recipes named (or in the groups named), in the order named, then the defined ones."""
    table = {**RECIPES, **defined}
    chosen: list[str] = []
    for name in [*names, *defined]:
        for member in GROUPS.get(name, [name]):
            if member not in table:
                raise ValueError(f"no recipe {member!r} (recipes: {', '.join(table)}; groups: {', '.join(GROUPS)})")
            if member not in chosen:
                chosen.append(member)
    return {name: table[name] for name in chosen}
