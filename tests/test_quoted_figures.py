"""The figures the README and the guides quote, read again from what produced them: the result files of
the benchmarks (benchmarks/results/), the presets (configs/*.toml) and the code that sizes a network. A
figure that is measured again, or a preset that changes, fails here until the words follow it."""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict
from pathlib import Path

import pytest

from inr_cli.config import build_config
from inr_cli.core.network import NetworkSpec
from inr_cli.core.sizing import fit_to_image, model_bytes

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def text(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


def result(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def preset_steps(preset: str) -> int:
    return tomllib.loads((ROOT / "configs" / f"{preset}.toml").read_text())["training"]["steps"]


def fit_psnr(results: list[dict], preset: str, image: str, size: int) -> float:
    return next(r["fit_psnr"] for r in results if (r["preset"], r["image"], r["size"]) == (preset, image, size))


def network_bytes(preset: str, width: int, height: int, channels: int = 3) -> int:
    """The bytes of the network `inr train --preset PRESET` fits to a width x height image, stored as
    the preset's --dtype says."""
    config, _ = fit_to_image(build_config(None, {}, preset), width, height, channels)
    return model_bytes(NetworkSpec.from_config(config, channels).parameter_count(), config.network.dtype)


def decimal_bytes(count: int) -> str:
    """Bytes in kB or MB, three significant figures: 532 kB, 1.08 MB, 27.2 MB."""
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"


def times(ratio: float) -> str:
    return f"{ratio:.2g}x"


def cost_row(preset: str) -> str:
    """The README's cost table's cells for a preset: on the sample and on a 12-megapixel photo."""
    cells = []
    for width, height in ((192, 128), (4000, 3000)):
        size = network_bytes(preset, width, height)
        cells.append(f"{decimal_bytes(size)}: {times(size / (width * height * 3))} the pixels")
    return " | ".join(cells)


def test_the_cost_of_a_network_against_its_image():
    readme = text("README.md")
    assert f"on the 192x128 sample ({decimal_bytes(192 * 128 * 3)} of 8-bit pixels)" in readme
    assert f"on a 12-megapixel photo ({decimal_bytes(4000 * 3000 * 3)})" in readme
    for preset in ("siren", "hashgrid"):
        stored = ", stored in float16" if preset == "hashgrid" else ""
        row = f"(`{preset}`){stored} | {cost_row(preset)} |"
        assert row in readme, f"the README's cost of {preset}: {row}"
    siren = decimal_bytes(network_bytes("siren", 192, 128))
    assert network_bytes("siren", 4000, 3000) == network_bytes("siren", 192, 128)  # "whatever the image"
    assert f"A SIREN is the same {siren} whatever the image" in readme


def presets_rows() -> list[tuple[str, str]]:
    """(document, what it quotes) for every figure of the presets tables, from its source."""
    siren = result("upscaling-cpu-32-256-lr4e-4.json")["results"]
    fourier = result("upscaling-cpu-256-fourier-mean.json")["results"]
    sigmoid = [row for run in result("upscaling-cpu-sigmoid-sigma.json")["runs"]  # sigma 6.9: the size's at 256 px
               if run["set"] == {"fourier_sigma": 6.9} for row in run["results"]]
    # The preset at 512 px (sized: 8 levels, float16; its linear output and learning rate), and before it
    # was sized (tables of 2^19)
    run = result("hashgrid-linear-output-cpu-512.json")
    hashgrid = run["summary"]["512"]["hg-lr5e-3"]
    before = result("hashgrid-lr-cpu-512.json")["summary"]["512"]["hg-lr2e-2"]
    preset = fit_to_image(build_config(None, {}, "hashgrid"), 512, 512, 3)[0]  # as time_to_quality.py sizes it
    measured = json.loads(run["results"][0]["key"])[2]  # the configuration the run trained
    for section in ("network", "encoding", "optimizer"):
        assert measured[section] == asdict(getattr(preset, section)), section
    assert preset.encoding.levels == 8 and preset.network.dtype == "float16" and preset.network.linear_output
    sets = {row["dataset"]: row["held_out"]["mean_psnr"] for row in result("weights-suite-cpu-32-lr3e-3.json")["rows"]
            if (row["recipe"], row["start"]) == ("default", "shared")}

    def pair(results, preset):
        return f"{fit_psnr(results, preset, 'coffee', 256):.1f} / {fit_psnr(results, preset, 'rocket', 256):.1f} dB"

    def each(results, preset):
        return (f"coffee {fit_psnr(results, preset, 'coffee', 256):.1f} dB, "
                f"rocket {fit_psnr(results, preset, 'rocket', 256):.1f} dB at 256 px")

    low, high = min(sets.values()), max(sets.values())
    return [
        ("README.md", f"| `siren` | SIREN 3x256 | {preset_steps('siren')} | {pair(siren, 'siren')} (coffee / rocket"),
        ("README.md", f"| `hashgrid` | hash grid + ReLU 2x64 | {preset_steps('hashgrid')} | 40 dB in "
                      f"{hashgrid['steps_40dB']} steps (coffee, 512 px), the network no larger than the photo "
                      f"({before['steps_40dB']} steps with tables of 11x its bytes)"),
        ("README.md", f"| {preset_steps('fourier')} | {pair(fourier, 'fourier')} (coffee / rocket"),
        ("README.md", f"| {preset_steps('sigmoid')} | {pair(sigmoid, 'sigmoid')} (coffee / rocket"),
        ("README.md", f"| {preset_steps('sets')} | {low:.1f}-{high:.1f} dB (32-px sets, 2x32)"),
        ("docs/training.md", f"| {preset_steps('siren')} | {each(siren, 'siren')} |"),
        ("docs/training.md", f"| {preset_steps('hashgrid')} | 40 dB at 512 px in about {hashgrid['steps_40dB']} steps, "
                             f"the network no larger than the photo ({before['steps_40dB']} with tables of 2^19"),
        ("docs/training.md", f"| {preset_steps('fourier')} | {each(fourier, 'fourier')} |"),
        ("docs/training.md", f"| {preset_steps('sigmoid')} | {each(sigmoid, 'sigmoid')} |"),
        ("docs/training.md", f"| {preset_steps('sets')} | 32-px sets at 2x32: letters {sets['letters']:.1f}, photo "
                             f"tiles {sets['photos']:.1f}, digits {sets['digits']:.1f} dB |"),
    ]


@pytest.mark.parametrize("doc, quoted", presets_rows(), ids=lambda value: value[:40])
def test_the_presets_tables_quote_their_results(doc, quoted):
    assert quoted in text(doc), f"{doc} should quote: {quoted}"


def test_the_quick_start_quotes_its_run():
    run = result("quick-start-cpu-300.json")
    assert run["command"] == "inr train --steps 300 --device cpu" and run["steps"] == 300
    readme = text("README.md")
    assert f"&& {run['command'].removesuffix(' --device cpu')}  " in readme  # the quick start's first line
    assert f"reaches {run['psnr']:.1f} dB on the sample" in readme
    assert f"{run['psnr']:.1f} dB in the quick start's 300 steps on the CPU" in text("BENCHMARKS.md")


def test_the_checks_can_fail():
    assert decimal_bytes(532_492) == "532 kB" and decimal_bytes(1_075_900) == "1.08 MB" and times(0.0148) == "0.015x"
    assert "| `siren` | SIREN 3x256 | 999 |" not in text("README.md")


def test_the_subset_psnr_figures_the_hash_grid_guide_quotes():
    """The 250-megapixel mosaic's reading of its PSNR on 2^20 pixels: its standard error, and how far a
    region's 2^20 pixels read from every pixel of it (benchmarks/gigapixel_psnr.py)."""
    measured = result("gigapixel-250-cpu.json")["psnr"]
    error = measured["subsets"][str(1 << 20)]["standard_error_db"]
    region = measured["region"]
    apart = abs(region["every_pixel_psnr"] - region["subset_psnr_2^20"])
    guide = " ".join(text("docs/hashgrid.md").split())
    assert f"standard error was {error:.3f} dB" in guide
    assert f"2^20 random pixels read {apart:.3f} dB from every pixel" in guide


def test_the_latents_figures_the_guides_quote():
    """Sets of latents on the weights suite (benchmarks/weights_suite.py --starts latents): the PSNR and
    the probes' accuracy that BENCHMARKS.md's table and the learning-on-weights guide quote."""
    def latents(name: str) -> dict:
        return next(r for r in result(f"weights-suite-cpu-32-latents-{name}.json")["rows"] if r["start"] == "latents")

    def pixels_probe(name: str) -> dict:
        """The probe on the pixels that result `name` measured beside its latents."""
        return next(iter(result(f"weights-suite-cpu-32-latents-{name}.json")["pixels"].values()))

    table = text("BENCHMARKS.md")
    guide = " ".join(text("docs/learning-on-weights.md").split())
    for name, dataset in (("2x32-letters", "letters"), ("2x32-photos", "photo tiles"), ("2x32-digits", "digits"),
                          ("2x32-shapes", "shapes, not tuned on"), ("3x64-letters", "letters"),
                          *((f"3x64-192-{name}", name) for name in ("letters", "photos", "digits", "shapes"))):
        row = latents(name)
        accuracy = row["accuracy"]
        cell = (f"{row['held_out']['mean_psnr']:.2f} / {row['held_out_at']['10']['mean_psnr']:.2f} dB, "
                f"{accuracy['linear']:.1%} / {accuracy['mlp']:.1%}")
        assert cell in table, f"BENCHMARKS.md should quote {dataset}: {cell}"
    digits, letters = latents("2x32-digits")["accuracy"]["linear"], latents("2x32-letters")["accuracy"]["linear"]
    assert f"({digits:.1%} against 95.0%)" in guide
    assert f"letters ({letters:.1%}, {latents('3x64-letters')['accuracy']['linear']:.1%} over a 3x64 base" in guide
    side = latents("2x32-letters")["side_by_side"]
    assert f"**{side['latents_images_per_second_over_whole']:.1f}x the images per second**" in table
    wide = latents("3x64-192-letters")
    assert (f"on the letters ({wide['accuracy']['linear']:.1%}) and draw the digits at "
            f"{latents('3x64-192-digits')['held_out_at']['10']['mean_psnr']:.1f} dB in 10 steps") in guide
    for name in ("3x64-192-letters-side-by-side", "3x128-384-3200-letters-all-fonts-side-by-side"):
        side = latents(name)["side_by_side"]
        assert f"**{side['latents_images_per_second_over_whole']:.1f}x**" in table, name
    assert f"**{side['runs'][0]['whole_mean_steps']:.1f} steps** against the latents' 3" in " ".join(table.split())
    for name in ("3x128-384-3200-letters-all-fonts", "3x128-384-3200-shapes-400"):  # as many images as there are
        row, pixels = latents(name), pixels_probe(name)
        drawn = f"{row['held_out']['mean_psnr']:.2f} / {row['held_out_at']['10']['mean_psnr']:.2f} dB"
        assert (f"{drawn}, {row['accuracy']['linear']:.1%} | goal 30 dB in 10 steps; the pixels "
                f"{pixels['linear']:.1%} |") in table, name
        assert f"**{drawn} in 3 / 10 steps**" in " ".join(table.split()), name
    tiles = latents("3x128-384-3200-photos-all-tiles")
    assert (f"the held-out tiles drew at {tiles['held_out']['mean_psnr']:.2f} / "
            f"{tiles['held_out_at']['10']['mean_psnr']:.2f} dB in 3 / 10 steps") in " ".join(table.split())
    kodak = latents("3x128-384-3200-kodak-tiles")
    assert (f"{kodak['held_out']['mean_psnr']:.2f} / {kodak['held_out_at']['10']['mean_psnr']:.2f} dB in 3 / 10 steps, "
            f"the training tiles {kodak['training']['mean_psnr']:.2f}; a linear probe "
            f"{kodak['accuracy']['linear']:.1%}") in " ".join(table.split())
    shapes = latents("3x128-384-3200-shapes-400")
    assert (f"the held-out ones drew at {shapes['held_out_at']['10']['mean_psnr']:.1f} dB in 10 steps, and a linear "
            f"probe on their latents reached {shapes['accuracy']['linear']:.1%}") in guide
    fonts = latents("3x128-384-3200-letters-all-fonts")
    assert (f"{fonts['held_out']['mean_psnr']:.1f} dB in 3 steps and {fonts['held_out_at']['10']['mean_psnr']:.1f} "
            f"in 10 over a 3x128 base learned from the letters of 64 fonts") in guide
    # depth: the tiles over 6x128, 3x256 and 8x128; the letters over 6x128 at two outer rates
    said = " ".join(table.split())

    def drawn(row: dict) -> str:
        return f"{row['held_out']['mean_psnr']:.2f} / {row['held_out_at']['10']['mean_psnr']:.2f} dB"

    deep, wide = latents("6x128-768-1600-photos-all-tiles"), latents("3x256-768-1600-photos-all-tiles")
    deep_at_10 = deep["held_out_at"]["10"]
    assert f"a **6x128** base drew the held-out tiles at **{drawn(deep)} in 3 / 10 steps**" in said
    assert (f"its training tiles at {deep['training']['mean_psnr']:.2f}, and a linear probe on the latents reached "
            f"**{deep['accuracy']['linear']:.1%}**") in said
    assert f"3x256, drew less: {drawn(wide)}" in said
    assert (f"{deep_at_10['share_at_30_db']:.0%} of the held-out tiles drew at 30 dB or more in 10 steps, the "
            f"busiest at {deep_at_10['min_psnr']:.1f} dB") in said
    collapsed = latents("8x128-1024-1600-photos-all-tiles")
    assert collapsed["meta_init"]["best_outer_step"] == 160
    assert f"({drawn(collapsed)} from the base of step 160)" in said
    readings = latents("6x128-768-1600-letters-all-fonts")["meta_init"]["heldout_psnr_after_k"]
    assert max(readings[1:]) < readings[0]  # worse from the first outer step
    slower = latents("6x128-768-1600-lr3e-4-letters-all-fonts")
    assert f"drew the unseen fonts at **{drawn(slower)} in 3 / 10 steps**" in said
    assert (f"{slower['held_out_at']['10']['share_at_30_db']:.0%} of them at 30 dB or more in 10 steps (the most "
            f"unusual fonts at {slower['held_out_at']['10']['min_psnr']:.1f})") in said
    pixels = pixels_probe("6x128-768-1600-lr3e-4-letters-all-fonts")
    assert f"a linear probe {slower['accuracy']['linear']:.1%} against the pixels' {pixels['linear']:.1%}" in said
    assert (f"over 6x128 with 768 latents the held-out photo tiles drew at {deep_at_10['mean_psnr']:.1f} dB in 10 "
            f"steps (a linear probe {deep['accuracy']['linear']:.1%}") in guide
    assert f"over 3x256 with 768 at {wide['held_out_at']['10']['mean_psnr']:.1f}" in guide
    tiles = latents("6x128-768-1600-lr3e-4-photos-all-tiles")
    tiles_at_10 = tiles["held_out_at"]["10"]
    assert (f"the tiles over 6x128 at 3e-4 drew at **{drawn(tiles)} in 3 / 10 steps**, a linear probe "
            f"**{tiles['accuracy']['linear']:.1%}**") in said
    assert f"{tiles_at_10['share_at_30_db']:.0%} of the held-out tiles at 30 dB or more in 10 steps" in said
    # the outer rate by depth: 3e-4 at 6x128 above, 0.001 at 3x128
    shallow = latents("3x128-384-3200-letters-all-fonts")
    shallow_slow = latents("3x128-384-3200-lr3e-4-letters-all-fonts")
    assert shallow_slow["meta_init"]["outer_lr"] == 3e-4
    assert shallow["held_out"]["mean_psnr"] > shallow_slow["held_out"]["mean_psnr"]
    assert (f"3x128 with 384 latents at 3e-4, 3200 outer steps, drew the unseen fonts at {drawn(shallow_slow)} in "
            f"3 / 10 steps against {drawn(shallow).removesuffix(' dB')} at 0.001") in said
    assert (f"a 3x128 base learned the letters better at 0.001 ({shallow['held_out_at']['10']['mean_psnr']:.1f} dB in "
            f"10 steps against {shallow_slow['held_out_at']['10']['mean_psnr']:.1f})") in guide
    from inr_cli.sets.meta import base_outer_lr

    assert (base_outer_lr(shallow["base"]["layers"]), base_outer_lr(slower["base"]["layers"])) == (1e-3, 3e-4)
    # bases learned for ten inner steps: the tiles a little better, the letters unstable
    ten = latents("6x128-768-k10-800-lr3e-4-photos-all-tiles")
    assert ten["meta_init"]["inner_steps"] == 10 and ten["held_out"]["mean_steps"] == 10
    assert (f"at **{ten['held_out']['mean_psnr']:.2f} dB in 10 steps** ({ten['held_out_at']['3']['mean_psnr']:.2f} "
            f"in 3), against {tiles_at_10['mean_psnr']:.2f} from the base learned for 3 steps") in said
    assert (f"{ten['held_out']['share_at_30_db']:.0%} of them at 30 dB or more in 10 steps (the busiest at "
            f"{ten['held_out']['min_psnr']:.1f} dB), a linear probe {ten['accuracy']['linear']:.1%}") in said
    fonts_ten = latents("6x128-768-k10-800-lr1e-4-letters-all-fonts")
    assert (f"the unseen fonts drew at {fonts_ten['held_out']['mean_psnr']:.2f} dB in 10 steps "
            f"({fonts_ten['held_out_at']['3']['mean_psnr']:.2f} in 3) against "
            f"{slower['held_out_at']['10']['mean_psnr']:.2f} from the base learned for 3") in said
    assert f"a linear probe on them still reached {fonts_ten['accuracy']['linear']:.1%}" in said
    longer = latents("6x128-768-3200-lr3e-4-photos-all-tiles")
    assert longer["meta_init"]["best_outer_step"] == 1600 and longer["meta_init"]["outer_steps"] == 3200
    assert (f"drew the held-out tiles at {drawn(longer)} in 3 / 10 steps (against {drawn(tiles).removesuffix(' dB')} "
            f"from 1600 outer steps whose rate reached 0), though a linear probe on those latents reached "
            f"**{longer['accuracy']['linear']:.1%}** against the pixels' "
            f"{pixels_probe('6x128-768-3200-lr3e-4-photos-all-tiles')['linear']:.1%} (MLP "
            f"{longer['accuracy']['mlp']:.1%}") in said
    assert f"outer rate of 3e-4 ({tiles_at_10['mean_psnr']:.2f} dB;" in said
    assert (f"at 3e-4 the 6x128 base drew the tiles at {tiles_at_10['mean_psnr']:.1f} dB "
            f"({tiles['accuracy']['linear']:.1%}) and the letters of unseen fonts at "
            f"{slower['held_out_at']['10']['mean_psnr']:.1f} dB in 10 steps") in guide


def test_the_picture_sizes_the_hash_grid_guide_says():
    """The sizes docs/hashgrid.md gives for previews and the run's pictures are the limits inr draws them within."""
    from inr_cli.limits import MAX_PICTURE_PIXELS, MAX_PICTURE_SIDE, MAX_PREVIEW_PIXELS, picture_size, preview_factor

    def megapixels(count: int) -> str:
        return "a megapixel" if count == 1 << 20 else f"{count / (1 << 20):g} megapixels"

    guide = " ".join(text("docs/hashgrid.md").split())
    assert (f"previews within {megapixels(MAX_PREVIEW_PIXELS)}, `render.png` and each of the three panels of "
            f"`comparison.png` (the image, the render, the error) within {megapixels(MAX_PICTURE_PIXELS)} and "
            f"{MAX_PICTURE_SIDE} px a side") in guide
    # the 13.4-megapixel photo the guide follows: its pictures at every 2nd pixel, its previews within the limit
    assert picture_size(4224, 3168) == (2112, 1584) and "(the photo's every 2nd pixel each way)" in guide
    k = preview_factor(4224, 3168)
    assert -(-4224 // k) * -(-3168 // k) <= MAX_PREVIEW_PIXELS and "The previews (a megapixel at most)" in guide


def upscaling_rows() -> list[str]:
    """The table of the default road between the pixels by factor (BENCHMARKS.md, docs/upscaling.md):
    over the held-out photos and drawings trained at 96 px, render minus Lanczos (mean and worst) in
    PSNR and SSIM, and render minus bicubic."""
    run = result("upscaling-cpu-held-out-96.json")
    assert {r["preset"] for r in run["results"]} == {"hashgrid"} and run["set"] == {}  # the preset as it is
    rows = []
    for factor in ("2", "4", "8"):
        for kind in ("photos", "drawings"):
            scores = [(r["image"], r["factors"][factor]) for r in run["results"]
                      if r["image"].startswith("kodim") == (kind == "photos")]
            psnr = [(s["inr"]["psnr"] - s["lanczos"]["psnr"], image) for image, s in scores]
            ssim = [(s["inr"]["ssim"] - s["lanczos"]["ssim"], image) for image, s in scores]
            bicubic = sum(s["inr"]["psnr"] - s["bicubic"]["psnr"] for _, s in scores) / len(scores)
            rows.append(f"| {factor}x | {len(scores)} {kind} | {sum(g for g, _ in psnr) / len(psnr):+.2f} dB "
                        f"({min(psnr)[0]:+.2f}, {min(psnr)[1]}) | {sum(g for g, _ in ssim) / len(ssim):+.4f} "
                        f"({min(ssim)[0]:+.4f}, {min(ssim)[1]}) | {bicubic:+.2f} dB |")
    return rows


@pytest.mark.parametrize("doc", ["BENCHMARKS.md", "docs/upscaling.md"])
def test_the_upscaling_table_quotes_its_run(doc):
    quoted = text(doc)
    for row in upscaling_rows():
        assert row in quoted, f"{doc} should quote: {row}"


def test_the_before_after_picture_quotes_its_run():
    """The README's caption of docs/before-after.png and the upscaling guide's account of it quote the
    scores benchmarks/before_after.py made it with, for the preset inr train picks for a 96x64 image."""
    from inr_cli.runs.start import preset_for_size

    run = result("before-after-cpu.json")
    assert (run["train_width"], run["train_height"]) == (96, 64) and preset_for_size(96, 64) == "hashgrid"
    readme = " ".join(text("README.md").split())
    assert f"Lanczos upscaling ({run['lanczos']['psnr']:.2f} dB)" in readme
    assert f"the hash grid ({run['psnr']:.2f} dB)" in readme
    guide = " ".join(text("docs/upscaling.md").split())
    assert f"Lanczos upscaling: {run['lanczos']['psnr']:.2f} dB / SSIM {run['lanczos']['ssim']:.3f}" in guide
    assert f"rendered by `inr render`: {run['psnr']:.2f} dB / SSIM {run['ssim']:.3f}" in guide


def test_the_grid_of_latents_table_quotes_its_runs():
    """BENCHMARKS.md's table of latents in a grid against one vector (dev/spatial_latents.py) quotes
    each run's last held-out reading and its ceiling, row by row in the order the result lists them."""
    quoted = text("BENCHMARKS.md")
    runs = result("spatial-latents-cpu-32-photos-all-tiles.json")["runs"]
    rows = [line for line in quoted.splitlines() if line.startswith("  | ") and (" grid of " in line or
                                                                              "one vector (functa)" in line)]
    assert len(rows) == len(runs)
    for row, run in zip(rows, runs):
        last, ceiling = run["log"][-1], run["ceiling"]
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        assert f"--outer {cells[2]}" in run["command"], row
        assert cells[3:7] == [f"{last['3']['mean']:.2f}", f"{last['10']['mean']:.2f}", f"{last['10']['min']:.2f}",
                              f"{last['10']['share30']:.0%}"], row
        assert cells[7] == ("" if ceiling is None else
                            f"{ceiling['mean']:.2f}, {ceiling['min']:.2f}, {ceiling['share30']:.0%}"), row
