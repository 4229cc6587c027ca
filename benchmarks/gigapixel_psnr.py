"""The subset PSNR of a large run against every pixel's, within what two CPU cores allow: the whole
image's subsets of 2^16 to 2^22 pixels, each with the standard error it gives itself (the spread of
its pixels' squared errors), and every pixel of a 4096 x 4096 region at the image's centre beside 2^20
random pixels of that region. (On a GPU, benchmarks/gigapixel_run.py --full-psnr draws every pixel.)

    nice -n 10 python benchmarks/gigapixel_psnr.py RUN IMAGE OUT.json
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from inr_cli.backends import make_backend  # noqa: E402
from inr_cli.core.coords import pixel_coords  # noqa: E402
from inr_cli.core.metrics import psnr_from_mse  # noqa: E402
from inr_cli.core.pixels import PixelImage, as_floats  # noqa: E402
from inr_cli.core.render import evaluate_points, render_rows  # noqa: E402
from inr_cli.core.subset_psnr import PixelSubset  # noqa: E402
from inr_cli.formats import checkpoint as ckpt  # noqa: E402
from inr_cli.formats.data import load_training_data  # noqa: E402

run, image_path, out = sys.argv[1:4]
saved = ckpt.load(run)
image = load_training_data(image_path)
backend = make_backend("cpu", quiet=True)
result = {"run": run, "image": image_path, "size": f"{image.width}x{image.height}"}

def standard_error_db(subset):
    drawn = evaluate_points(backend, saved.spec, saved.params.reshape(1, -1), subset.coords)[0].astype(np.float64)
    errors = ((drawn - subset.targets) ** 2).mean(axis=1)  # each pixel's squared error, over its channels
    mse = errors.mean()
    se = errors.std(ddof=1) / np.sqrt(len(errors)) * np.sqrt(1 - len(errors) / subset.pixels)
    return psnr_from_mse(mse), 10 / np.log(10) * se / mse

result["subsets"] = {}
for count in (1 << 16, 1 << 18, 1 << 20, 1 << 22):
    start = time.perf_counter()
    value, se = standard_error_db(PixelSubset.of(image, count=count))
    result["subsets"][str(count)] = {"psnr": round(value, 4), "standard_error_db": round(float(se), 4),
                                     "seconds": round(time.perf_counter() - start, 1)}
    print(count, result["subsets"][str(count)], flush=True)
    open(out, "w").write(json.dumps(result, indent=1) + "\n")
side = 4096
left, top = (image.width - side) // 2, (image.height - side) // 2
region = PixelImage(np.ascontiguousarray(image.pixels[top:top + side, left:left + side]), image.channels)
start = time.perf_counter()
total = 0.0
for row_start, row_stop, values in render_rows(backend, saved.spec, saved.params, image.width, image.height,
                                               region=(left, top, left + side, top + side)):
    drawn = np.clip(values, 0.0, 1.0).astype(np.float64)
    total += float(np.sum((drawn - as_floats(region.pixels[row_start:row_stop])) ** 2))
whole_region = psnr_from_mse(total / (side * side * image.n_channels))
result["region"] = {"where": [left, top, left + side, top + side], "every_pixel_psnr": round(whole_region, 4),
                    "seconds": round(time.perf_counter() - start, 1)}
# 2^20 of the region's pixels, drawn as the run draws its subset, against the region's every pixel
rng = np.random.default_rng(0)
index = np.sort(rng.choice(side * side, size=1 << 20, replace=False))
rows, cols = np.divmod(index, side)
coords = pixel_coords((rows + top) * image.width + cols + left, image.width, image.height)
drawn = evaluate_points(backend, saved.spec, saved.params.reshape(1, -1), coords)[0].astype(np.float64)
truth = as_floats(region.pixels[rows, cols]).astype(np.float64)
result["region"]["subset_psnr_2^20"] = round(psnr_from_mse(float(np.mean((drawn - truth) ** 2))), 4)
print(result["region"], flush=True)
open(out, "w").write(json.dumps(result, indent=1) + "\n")
