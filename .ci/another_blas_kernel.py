"""Print an OpenBLAS kernel (an OPENBLAS_CORETYPE value) other than the one this processor gets, for
running the tests that compare numbers a second time: a kernel adds a product's terms in its own
order, and no test may depend on which one the machine that runs it happens to pick."""

import os
import platform
import subprocess
import sys

# Kernels the DYNAMIC_ARCH OpenBLAS in NumPy's wheels accepts, per machine, in order of preference.
CANDIDATES = {
    "x86_64": ["Haswell", "Sandybridge", "SkylakeX", "Nehalem"],
    "AMD64": ["Haswell", "Sandybridge", "SkylakeX", "Nehalem"],
    "aarch64": ["ARMV8", "NEOVERSEN1", "CORTEXA57"],
    "arm64": ["ARMV8", "NEOVERSEN1", "CORTEXA57"],
}
PROBE = ("import threadpoolctl, numpy; print(' '.join(i.get('architecture') or '?' for i in "
         "threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'))")


def kernel_under(coretype: str | None) -> str:
    """The kernel NumPy's OpenBLAS runs with OPENBLAS_CORETYPE=coretype (None: as this environment says)."""
    environment = dict(os.environ, **({"OPENBLAS_CORETYPE": coretype} if coretype else {}))
    return subprocess.run([sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> int:
    own = kernel_under(None)  # what the first pass ran with
    if not own:
        print("NumPy does not use OpenBLAS here: no other kernel to force", file=sys.stderr)
        return 1
    for candidate in CANDIDATES.get(platform.machine(), []):
        forced = kernel_under(candidate)
        if forced and forced != own:
            print(candidate)
            print(f"BLAS kernel: {own} in the first pass, {forced} forced for the second", file=sys.stderr)
            return 0
    print(f"no other OpenBLAS kernel than {own} found for {platform.machine()}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
