"""How `inr` ends: main() returns the exit code to an in-process caller; the console script and
`python -m inr_cli` end the process without the interpreter's teardown, yet with every byte written
(Python's and C's buffers, the exit handlers' and the threads' output) and the right status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import inr_cli
from inr_cli.cli import CLOSED_OUTPUT, main

ROOT = Path(__file__).resolve().parent.parent
# What a program does before the command runs: output that only a complete exit writes. A thread
# that prints once main() has returned (run() must wait for it), an exit handler that prints much
# (more than a pipe holds) and then a last line left in Python's buffer, and a line left in C's
# stdio buffer (a pipe's is not line-buffered).
LATE_OUTPUT = """
import atexit, ctypes, threading
import inr_cli.cli as cli

returned = threading.Event()
command = cli.main
def main(*args):
    code = command(*args)
    returned.set()
    return code
cli.main = main

def late_thread():
    returned.wait()
    print("from a thread")
threading.Thread(target=late_thread).start()

def at_exit():
    print("x" * 200_000)
    print("end of Python's output")
atexit.register(at_exit)
ctypes.CDLL(None).printf(b"from C\\n")
"""
# In the order they reach the pipe: the thread's line before the exit handlers run, C's buffer last.
LATE_LINES = ["from a thread", "x" * 200_000, "end of Python's output", "from C"]


def console_script(folder: Path, prelude: str) -> list[str]:
    """The `inr` script as pip installs it, for the entry point pyproject.toml names."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]["inr"]
    module, _, function = entry.partition(":")
    script = folder / "inr"
    script.write_text(f"import sys\n{prelude}\nfrom {module} import {function}\n"
                      f"if __name__ == '__main__':\n    sys.exit({function}())\n")
    return [str(script)]


def as_module(prelude: str) -> list[str]:
    """`python -m inr_cli`, after the prelude."""
    return ["-c", f"{prelude}\nimport runpy\nrunpy.run_module('inr_cli', run_name='__main__', alter_sys=True)"]


@pytest.fixture(params=[console_script, as_module], ids=["console script", "python -m inr_cli"])
def inr(request, tmp_path):
    """A function running `inr ARGS` one way or the other, after a prelude: (exit code, stdout, stderr)."""
    # Buffered, as a program's output usually is: PYTHONUNBUFFERED would unbuffer C's stdout too.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}

    def run_inr(*args: str, prelude: str = "", stdout=subprocess.PIPE) -> tuple[int, str, str]:
        program = console_script(tmp_path, prelude) if request.param is console_script else as_module(prelude)
        result = subprocess.run([sys.executable, *program, *args], stdout=stdout, stderr=subprocess.PIPE,
                                text=True, env={**env, "PYTHONPATH": str(ROOT)}, timeout=120)
        return result.returncode, result.stdout, result.stderr

    return run_inr


def test_the_console_script_is_the_fast_exit():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"inr": "inr_cli.cli:run"}
    assert "from inr_cli.cli import run" in (ROOT / "inr_cli" / "__main__.py").read_text(encoding="utf-8")


def test_output_through_a_pipe_arrives_complete(inr):
    code, stdout, stderr = inr("--version", prelude=LATE_OUTPUT)
    assert code == 0, stderr
    assert stdout.splitlines() == [f"inr {inr_cli.__version__}", *LATE_LINES]
    assert stderr == ""


def test_exit_codes(inr, tmp_path):
    code, stdout, stderr = inr("train", "--no-such-flag")
    assert code == 2 and stderr.startswith("error: No such option: --no-such-flag"), stderr
    assert stderr.count("\n") == 1
    code, _, stderr = inr("info", str(tmp_path / "nowhere"))
    assert code == 1 and stderr.startswith("error: "), stderr
    assert "Traceback" not in stderr


def test_closed_stdout_is_status_120_without_a_traceback(inr):
    reading, writing = os.pipe()
    os.close(reading)  # no reader: every write to the pipe fails (EPIPE)
    try:
        code, _, stderr = inr("--version", stdout=writing)
    finally:
        os.close(writing)
    assert code == CLOSED_OUTPUT == 120
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


# `inr` held in the import of one module (said on stdout) until a signal ends it: Ctrl-C lands there
# when the test has read that line, however slow the machine.
HELD_IN_AN_IMPORT = """
import signal, time

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, where the tests' shell ignored it

class Held:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            print("importing", name, flush=True)
            time.sleep(120)
        return None

sys.meta_path.insert(0, Held())
"""


@pytest.mark.parametrize("module", ["typer", "inr_cli.commands.view"])  # cli.py's first import, a command's
@pytest.mark.parametrize("way", [console_script, as_module], ids=["console script", "python -m inr_cli"])
def test_ctrl_c_while_inr_starts_is_one_line_and_status_130(way, module, tmp_path):
    prelude = "import sys\n" + HELD_IN_AN_IMPORT.format(module=module)
    program = way(tmp_path, prelude) if way is console_script else way(prelude)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, *program, "info", str(tmp_path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout.readline() == f"importing {module}\n", process.stderr.read()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130 and stderr == "error: interrupted\n", stderr


def test_main_returns_the_exit_code_in_process(tmp_path, capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"inr {inr_cli.__version__}\n"
    assert main(["train", "--no-such-flag"]) == 2
    assert main(["info", str(tmp_path / "nowhere")]) == 1
    assert "no such run" in capsys.readouterr().err
