"""The test run's scheduler (tests/xdist_scheduling.py) through a worker's crash: pytest-xdist in a
child pytest, a test that ends its worker with os._exit, and the run ends, that test failed, every
other run once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")
ROOT = Path(__file__).resolve().parent.parent

# Five tests, two in one group (the Ray clusters' kind of group, tests/conftest.py); `crashing` ends
# its worker. Each test appends its name to the file named by $RAN: what ran, and how often.
TESTS = '''
import os
import pytest

def ran(name):
    with open(os.environ["RAN"], "a") as file:
        file.write(name + "\\n")

def finish(name):
    ran(name)
    if name == "{crashing}":
        os._exit(1)

def test_a():
    finish("test_a")

def test_b():
    finish("test_b")

def test_c():
    finish("test_c")

@pytest.mark.xdist_group("cluster")
def test_d():
    finish("test_d")

@pytest.mark.xdist_group("cluster")
def test_e():
    finish("test_e")
'''


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("crashing", ["test_a", "test_b", "test_d", "test_e"])
def test_a_crashed_worker_fails_its_test_and_the_run_ends(tmp_path, workers, crashing):
    (tmp_path / "test_crash.py").write_text(TESTS.format(crashing=crashing))
    ran = tmp_path / "ran.txt"
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.xdist_scheduling",
         "-n", str(workers), "--dist", "loadgroup", "test_crash.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,  # a guard against a hang, not a pace
        env={**os.environ, "PYTHONPATH": str(ROOT), "RAN": str(ran)})
    assert process.returncode == 1, process.stdout + process.stderr
    assert f"FAILED test_crash.py::{crashing} - worker" in process.stdout, process.stdout
    assert "1 failed, 4 passed" in process.stdout, process.stdout
    assert sorted(ran.read_text().split()) == ["test_a", "test_b", "test_c", "test_d", "test_e"]
