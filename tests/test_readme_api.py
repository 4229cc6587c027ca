"""The README's section "Using the networks elsewhere" runs as written: its Python blocks, in order,
on images this test makes, so that the documented API and file format cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import make_image

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Using the networks elsewhere"


def section_code_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, f"the README lost its section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_section_has_the_format_and_the_api():
    code = "\n".join(section_code_blocks())
    for name in ("def forward", "inr_cli.fit(", "inr_cli.fit_many(", "inr_cli.load(", ".render(", ".to_torch()",
                 ".to_jax()", ".weights", ".index"):
        assert name in code, f"the README's examples no longer show {name}"


def test_the_readme_examples_run(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    make_image(tmp_path / "photo.png", "RGB", size=(16, 12), seed=1)
    (tmp_path / "photos").mkdir()
    for seed, name in enumerate(("cat", "dog", "owl")):
        make_image(tmp_path / "photos" / f"{name}.png", "RGB", size=(16, 12), seed=10 + seed)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    for number, block in enumerate(section_code_blocks()):
        exec(compile(block, f"README.md {SECTION!r}, python block {number + 1}", "exec"), namespace)
    # what the blocks promise, seen from outside them
    assert namespace["pixels"].shape == (192, 256, 3) and str(namespace["pixels"].dtype) == "uint8"
    assert namespace["every"].shape == (3, 48 * 64, 3)
    assert namespace["same"].shape == namespace["colours"].shape == (3, 48 * 64, 3)
    assert (tmp_path / "runs" / "photo" / "checkpoint.npz").is_file()


def test_the_first_example_run_again_goes_on_with_its_new_runs(tmp_path, monkeypatch):
    """A notebook cell run a second time: fit writes new runs (runs/photo-2, runs/array-2), and the
    example goes on with those, not with the first ones: it uses where fit says it wrote."""
    make_image(tmp_path / "photo.png", "RGB", size=(16, 12), seed=1)
    (tmp_path / "photos").mkdir()
    for seed, name in enumerate(("cat", "dog", "owl")):
        make_image(tmp_path / "photos" / f"{name}.png", "RGB", size=(16, 12), seed=10 + seed)
    monkeypatch.chdir(tmp_path)
    first = section_code_blocks()[0]
    runs = []
    for _ in range(2):
        namespace: dict = {"__name__": "readme"}
        exec(compile(first, f"README.md {SECTION!r}, python block 1", "exec"), namespace)
        runs.append((namespace["net"].run_dir, namespace["noise"].run_dir))
    assert runs == [(Path("runs/photo"), Path("runs/array")), (Path("runs/photo-2"), Path("runs/array-2"))]
