"""The table of exit codes in docs/training.md, held to the code: each example it gives ends with its
row's code, and the codes it names are the ones inr_cli defines."""

from __future__ import annotations

import re
import shlex
import signal
from pathlib import Path

import pytest

from inr_cli.cli import CLOSED_OUTPUT, main
from inr_cli.errors import EXIT_RUNTIME, EXIT_USAGE
from tests.conftest import make_image

ROOT = Path(__file__).resolve().parent.parent


def table() -> dict[str, tuple[str, list[str]]]:
    """{code: (when, [example command lines])}, as the guide's table has them."""
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    section = text[text.index("### Exit codes"):]
    rows = [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            for line in section.splitlines() if line.startswith("| ")][2:]  # past the header and its rule
    return {code: (when, re.findall(r"`(inr [^`]+)`", examples)) for code, when, examples in rows}


def test_the_table_names_the_codes_inr_defines():
    rows = table()
    assert list(rows) == ["0", "1", "2", str(CLOSED_OUTPUT), "128 + the signal"]
    assert (EXIT_RUNTIME, EXIT_USAGE) == (1, 2) and CLOSED_OUTPUT == 120
    interrupted = rows["128 + the signal"][0]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # training_loop exits 128 + the signal
        assert f"{128 + sig} {'Ctrl-C' if sig == signal.SIGINT else sig.name}" in interrupted


@pytest.mark.parametrize("code, line", [(code, line) for code, (_, lines) in table().items() for line in lines])
def test_each_example_ends_with_its_code(code, line, tmp_path, monkeypatch):
    make_image(tmp_path / "photo.png", "RGB", size=(8, 6))
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(line)[1:]) == int(code), line
