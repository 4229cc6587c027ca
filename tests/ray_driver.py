"""A Ray driver of its own for the tests whose driver must hold what Ray's workers cannot reach:
`python -m tests.ray_driver SPEC.json` puts the spec's files in this process's fsspec memory://,
sets the spec's module settings of inr_cli.sets.cluster, then runs api.fit_many with this process
as the driver. A child of the test, not the pytest worker itself: Ray's C++ threads in a driver
(CoreWorker's io thread) once crashed the pytest worker that held them, and the whole run waited for
it; a crash here fails one test. (tests/test_fit_many_cluster.fit_in_a_driver_of_its_own writes the
spec and reads the result.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(spec_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text())
    import fsspec

    import inr_cli
    from inr_cli.sets import cluster as on_ray

    for name, value in spec["cluster_settings"].items():
        setattr(on_ray, name, value)
    memory = fsspec.filesystem("memory")
    for target, source in spec["memory"].items():
        memory.pipe(target, Path(source).read_bytes())
    inr_cli.fit_many(spec["source"], spec["out"], **spec["options"])


if __name__ == "__main__":
    main(sys.argv[1])
