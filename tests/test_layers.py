"""The package's layers: each module imports only from its own layer and those below it, so the data
path reads bottom to top with no arrow running back up (the core never reaches for a backend, a file
format or the run directory; the API never sits on the command line)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "inr_cli"

# Bottom to top. A new top-level module or package gets its place here.
LAYERS = {
    "settings": 1, "config": 1, "errors": 1, "console": 1, "hooks": 1, "progress": 1, "resources": 1,
    "core": 2,
    "backends": 3,
    "formats": 4, "loading": 4,
    "runs": 5, "sets": 5,
    "api": 6, "frameworks": 6,
    "commands": 7, "cli": 7, "viewer": 7, "__main__": 7,
}
# Imports that still run up a layer, each with the reason it is allowed for now. One that no longer
# occurs must leave this list.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    """0 for the package's root (its version, its lazy names): every layer may read it."""
    parts = module.split(".")
    return 0 if len(parts) == 1 else LAYERS[parts[1]]


def imported(path: Path, module: str, root: Path) -> set[str]:
    """Every inr_cli module `path` imports, at its top or inside a function (root: the folder that
    holds inr_cli/)."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:  # `from inr_cli import config`: the module, not the package
                candidate = f"{base}.{alias.name}"
                where = root / candidate.replace(".", "/")
                is_module = where.with_suffix(".py").is_file() or where.is_dir()
                found.add(candidate if is_module else base)
    return {name for name in found if name == "inr_cli" or name.startswith("inr_cli.")}


def upward_imports(package: Path = PACKAGE) -> set[tuple[str, str]]:
    upward = set()
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        for target in imported(path, module, package.parent):
            if layer(target) > layer(module):
                upward.add((module, target))
    return upward


def test_every_module_has_a_layer():
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert tops - set(LAYERS) == set(), "give each new module its layer in LAYERS"


def test_no_import_runs_up_a_layer():
    upward = upward_imports()
    assert upward - KNOWN_UPWARD == set()
    assert KNOWN_UPWARD - upward == set(), "an exception that no longer occurs must leave KNOWN_UPWARD"


def test_the_check_sees_an_upward_import(tmp_path):
    """The scan itself: a core module that reaches for a backend, even inside a function, is caught."""
    package = tmp_path / "inr_cli"
    for folder in ("core", "backends"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "core" / "loop.py").write_text("from inr_cli.core import state\n\n\ndef run():\n"
                                             "    from inr_cli.backends import make_backend\n")
    assert upward_imports(package) == {("inr_cli.core.loop", "inr_cli.backends")}
