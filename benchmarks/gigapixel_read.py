"""Seconds and peak memory of reading one large image as `inr train` reads it, in this process alone.

    python benchmarks/gigapixel_read.py bench-results/mosaic-250.tif direct   # tifffile / imagecodecs
    python benchmarks/gigapixel_read.py bench-results/mosaic-250.tif pillow   # Pillow, as for a small image

Run each in a fresh process: the peak is the process's high-water resident set.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inr_cli.formats import images  # noqa: E402


def main(argv=None) -> int:
    path, way = (argv or sys.argv[1:])[:2]
    if way == "pillow":
        images.LARGE_DECODE_PIXELS = 1 << 40  # every image through Pillow
    start = time.perf_counter()
    image = images.load_image(Path(path))
    print(json.dumps({"file": path, "way": way, "seconds": round(time.perf_counter() - start, 1),
                      "dtype": str(image.pixels.dtype), "shape": image.pixels.shape,
                      "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
