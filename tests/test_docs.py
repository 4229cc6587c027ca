"""The README, BENCHMARKS.md and the guides under docs/ as a user reads them: every Python block runs as written, on
images this test makes; every `inr` command they show names a command and options it takes, with
values it accepts; every link between them leads to a file and heading that exist. So the documented
API, file format and command lines cannot drift from the code."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest
import typer.main

import inr_cli
from inr_cli.cli import app
from tests.conftest import make_image

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = typer.main.get_command(app)
# Click's exceptions, from the Click that Typer builds on (its own copy since Typer 0.22, click before).
click = importlib.import_module(
    next(c.__module__ for c in type(COMMANDS).__mro__ if c.__module__.endswith("click.core"))[: -len("core")]
    + "exceptions")
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
# The Python blocks run in this order, one namespace per file, in one folder: the Python guide fits the
# set that the file formats' forward pass reads.
PYTHON_BLOCKS_IN_ORDER = ["README.md", "docs/python.md", "docs/file-formats.md", "docs/learning-on-weights.md"]


def name(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


def code_blocks(doc: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)


def run_blocks(doc: str, namespace: dict | None = None, first_only: bool = False) -> dict:
    namespace = {"__name__": "docs"} if namespace is None else namespace
    blocks = code_blocks(ROOT / doc, "python")
    for number, block in enumerate(blocks[:1] if first_only else blocks):
        exec(compile(block, f"{doc}, python block {number + 1}", "exec"), namespace)
    return namespace


@pytest.fixture
def pictures(tmp_path, monkeypatch):
    """photo.png and photos/{cat,dog,owl}.png, the files the examples name, in the working directory."""
    make_image(tmp_path / "photo.png", "RGB", size=(16, 12), seed=1)
    (tmp_path / "photos").mkdir()
    for seed, name_ in enumerate(("cat", "dog", "owl")):
        make_image(tmp_path / "photos" / f"{name_}.png", "RGB", size=(16, 12), seed=10 + seed)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_python_block_is_in_the_order_the_test_runs():
    with_python = {name(doc) for doc in DOCS if code_blocks(doc, "python")}
    assert with_python == set(PYTHON_BLOCKS_IN_ORDER), "add the file to PYTHON_BLOCKS_IN_ORDER"


def test_the_guides_show_the_format_and_the_api():
    code = "\n".join("\n".join(code_blocks(ROOT / doc, "python")) for doc in PYTHON_BLOCKS_IN_ORDER)
    for shown in ("def forward", "inr_cli.fit(", "inr_cli.fit_many(", "inr_cli.load(", ".render(", ".to_torch()",
                  ".to_jax()", ".weights", ".index", ".split(", ".to_torch_dataset()"):
        assert shown in code, f"the guides' examples no longer show {shown}"


def test_the_python_blocks_run(pictures):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    readme = run_blocks("README.md")
    guide = run_blocks("docs/python.md")
    formats = run_blocks("docs/file-formats.md")
    letters_set(pictures / "letters-inr")
    weights = run_blocks("docs/learning-on-weights.md")
    # what the blocks promise, seen from outside them
    assert readme["pixels"].shape == (384, 512, 3) and str(readme["pixels"].dtype) == "uint8"
    assert guide["pixels"].shape == (192, 256, 3) and str(guide["pixels"].dtype) == "uint8"
    assert guide["part"].shape == (128, 256, 3) and (guide["net"].run_dir / "big.tif").is_file()
    assert guide["every"].shape == (3, 48 * 64, 3)
    assert guide["same"].shape == guide["colours"].shape == (3, 48 * 64, 3)
    assert formats["picture"].shape == (48, 64, 3)
    assert (pictures / "runs" / "photo" / "checkpoint.npz").is_file()
    assert (pictures / "runs" / "photo-2" / "checkpoint.npz").is_file()  # the guide's fit, after the README's
    held_out = {weights["fonts"][i] for i in weights["test"].rows}
    assert held_out and held_out.isdisjoint(weights["fonts"][i] for i in weights["train"].rows)
    assert len(weights["dataset"]) == len(weights["train"])


def letters_set(out: Path) -> None:
    """The learning-on-weights guide's letters-inr, small: letters A and B in three 'fonts' (class
    folders A/ and B/, a file per font), fitted as the guide fits them."""
    for letter in ("A", "B"):
        (out.parent / "letters" / letter).mkdir(parents=True)
        for seed, font in enumerate(("Serif", "Sans", "Mono")):
            make_image(out.parent / "letters" / letter / f"{font}.png", "L", size=(8, 8), seed=seed + 10 * ord(letter))
    inr_cli.fit_many(out.parent / "letters", out, hidden=8, layers=1, steps=5, quiet=True)


def test_the_first_example_run_again_goes_on_with_its_new_runs(pictures):
    """A notebook cell run a second time: fit writes new runs (runs/photo-2, runs/array-2), and the
    example goes on with those, not with the first ones: it uses where fit says it wrote."""
    runs = []
    for _ in range(2):
        namespace = run_blocks("docs/python.md", first_only=True)
        runs.append((namespace["net"].run_dir, namespace["noise"].run_dir))
    assert runs == [(Path("runs/photo"), Path("runs/array")), (Path("runs/photo-2"), Path("runs/array-2"))]


def shown_commands() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(file, command line) for every `inr ...` line of a bash block, and (file, span) for every `inr ...`
    span in the text (a fragment of a command line: its values may be placeholders such as SEED)."""
    lines, spans = [], []
    for doc in DOCS:
        for block in code_blocks(doc, "bash"):
            lines += [(name(doc), line.strip()) for line in block.splitlines() if line.strip().startswith("inr ")]
        text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
        spans += [(name(doc), span) for span in re.findall(r"`(inr [^`]+)`", text)
                  if "..." not in span and len(span.split()) > 2]  # a command's name alone is no command line
    return lines, spans


def words_of(line: str) -> tuple[object, list[str]]:
    """The command and its words, up to the shell's redirection or the next command."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split = True
    words = list(lexer)[1:]
    words = words[: next((i for i, w in enumerate(words) if w in (">", "|", "&", "&&", ";")), len(words))]
    while words and words[0] == "--debug":  # the one option before the command
        words = words[1:]
    command = COMMANDS.commands.get(words[0] if words else "")
    if command is None:
        raise click.UsageError(f"no command {words[:1]}")
    return command, words


def parse(line: str) -> None:
    """The command line as inr's own parser reads it: an unknown command or option, a missing argument or
    value, or a value of the wrong type fails here. Parsing runs no command."""
    command, words = words_of(line)
    command.make_context(words[0], [word for word in words[1:] if word not in ("--help", "-h")])


def check_options(span: str) -> None:
    """A fragment: its command exists and takes each option it names."""
    command, words = words_of(span)
    known = {opt for param in command.params for opt in param.opts + param.secondary_opts}
    unknown = [word.split("=")[0] for word in words[1:] if word.startswith("-") and word.split("=")[0] not in known]
    if unknown and unknown != ["-"]:  # "-": standard output
        raise click.NoSuchOption(unknown[0])


def test_every_command_shown_parses():
    lines, spans = shown_commands()
    assert len(lines) > 40 and len(spans) > 20 and any(doc.startswith("docs/") for doc, _ in lines + spans)
    failures = []
    for check, shown in ((parse, lines), (check_options, spans)):
        for doc, line in shown:
            try:
                check(line)
            except click.ClickException as exc:
                failures.append(f"{doc}: {line}: {exc.format_message()}")
    assert not failures, "\n".join(failures)
    with pytest.raises(click.NoSuchOption):  # the checks can fail
        parse("inr train photo.png --no-such-option 3")
    with pytest.raises(click.BadParameter):
        parse("inr render runs/photo --size big")
    with pytest.raises(click.NoSuchOption):
        check_options("inr view --no-such-option")


def test_every_link_leads_somewhere():
    broken = []
    for doc in DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if "://" in target:
                continue
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            if not linked.exists():
                broken.append(f"{name(doc)}: {target}: no such file")
            elif anchor and anchor not in anchors(linked):
                broken.append(f"{name(doc)}: {target}: no such heading")
    assert not broken, "\n".join(broken)
    assert {"quick-start", "the-users-path"} <= anchors(ROOT / "README.md")  # the check can fail
    assert "no-such-heading" not in anchors(ROOT / "README.md")


def anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as dashes."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S),
                          flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}
