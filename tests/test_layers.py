"""The package's layers: each module imports only from its own layer and those below it, at the top
of the file or inside a function alike, and no modules import each other in a circle.

Bottom to top:
    1  settings and configuration, errors, limits, the console, hooks, progress, the package's own files,
       the API's argument checks, where outputs may go (outputs.py: the one rule every writer follows)
    2  core: coordinates, networks, the training state, pixels, the trainer and its step loop
       (a backend is handed in, never imported)
    3  backends
    4  formats: the files of the core's objects (and the networks as PyTorch or JAX functions)
    5  services: a run directory (runs/), fit-many (sets/), loading one network from either
    6  api.py, the library
    7  the commands and cli.py, the viewer beside them
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "inr_cli"
# Each module's layer, by its name or its package's (a package covers its modules); the package
# itself ("inr_cli": __version__ and the lazy accessors of the library) stands for its own file only.
LAYERS = {
    "inr_cli": 1, "inr_cli.settings": 1, "inr_cli.config": 1, "inr_cli.errors": 1, "inr_cli.console": 1,
    "inr_cli.hooks": 1, "inr_cli.progress": 1, "inr_cli.resources": 1, "inr_cli.extras": 1,
    "inr_cli.limits": 1, "inr_cli.arguments": 1, "inr_cli.outputs": 1,
    "inr_cli.core": 2,
    "inr_cli.backends": 3,
    "inr_cli.formats": 4, "inr_cli.frameworks": 4, "inr_cli.weights_data": 4,
    "inr_cli.runs": 5, "inr_cli.sets": 5, "inr_cli.loading": 5, "inr_cli.tune": 5,
    "inr_cli.sets.output_kind": 5, "inr_cli.sets.read_ahead": 5,
    "inr_cli.api": 6,
    "inr_cli.commands": 7, "inr_cli.cli": 7, "inr_cli.starting": 7, "inr_cli.__main__": 7, "inr_cli.viewer": 7,
}


@dataclass(frozen=True)
class Import:
    file: str  # the importing file, from the root
    line: int
    importer: str  # its module's name
    module: str  # the module of the package it imports
    annotation_only: bool = False  # under `if TYPE_CHECKING:`: names for annotations, never run

    def __str__(self) -> str:
        return f"{self.file}:{self.line} -> {self.module}"


def module_files(root: Path, package: str) -> dict[str, Path]:
    """{module name: file} for every module of the package under root."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(root: Path, package: str) -> list[Import]:
    """Every import of one of the package's modules by another, anywhere in a file: `import a.b`,
    `from a import b` (the module a.b where there is one, else a), relative imports resolved."""
    modules = module_files(root, package)
    found = []
    for importer, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for_annotations = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
                           and "TYPE_CHECKING" in ast.unparse(node.test) for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = importer.split(".")[: len(importer.split(".")) - node.level + is_package]
                    base = ".".join(parent + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            for target in dict.fromkeys(targets):
                while target and target not in modules:  # `import a.b.c` of a name in a.b
                    target = target.rpartition(".")[0]
                if target and target != importer:
                    found.append(Import(path.relative_to(root).as_posix(), node.lineno, importer, target,
                                        id(node) in for_annotations))
    return found


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        name = ".".join(parts[:length])
        if name in layers and (length == len(parts) or length > 1):
            return layers[name]
    return None


def unplaced(root: Path, package: str, layers: dict[str, int]) -> list[str]:
    return [m for m in module_files(root, package) if layer_of(m, layers) is None]


def upward(found: list[Import], layers: dict[str, int]) -> list[str]:
    """Each import of a module of a higher layer, as file:line -> module (layer a -> layer b)."""
    return [f"{imp} (layer {layer_of(imp.importer, layers)} -> {layer_of(imp.module, layers)})" for imp in found
            if layer_of(imp.module, layers) > layer_of(imp.importer, layers)]


def cycles(found: list[Import]) -> list[str]:
    """Each group of modules that import each other in a circle, with the imports that close it.
    Imports for annotations alone never run, so they close no circle."""
    found = [imp for imp in found if not imp.annotation_only]
    graph: dict[str, set[str]] = {}
    for imp in found:
        graph.setdefault(imp.importer, set()).add(imp.module)
        graph.setdefault(imp.module, set())
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [f"{', '.join(sorted(group))}: " + "; ".join(str(imp) for imp in found
                                                        if imp.importer in group and imp.module in group)
            for group in groups]


def test_every_module_has_a_layer():
    missing = unplaced(ROOT, PACKAGE, LAYERS)
    if missing:
        pytest.fail(f"modules without a layer (add them to LAYERS): {', '.join(missing)}", pytrace=False)


def test_no_module_imports_from_a_higher_layer():
    wrong = upward(imports(ROOT, PACKAGE), LAYERS)
    if wrong:
        pytest.fail("imports from a higher layer:\n" + "\n".join(wrong), pytrace=False)


def test_no_import_cycles():
    circles = cycles(imports(ROOT, PACKAGE))
    if circles:
        pytest.fail("modules that import each other in a circle:\n" + "\n".join(circles), pytrace=False)


def test_the_checks_find_what_they_look_for(tmp_path):
    """On a small package of known faults: an upward import at the top and one in a function, a
    relative one, a circle, a module without a layer."""
    files = {
        "pkg/__init__.py": "",
        "pkg/low.py": "import os\nfrom pkg.high import thing\n",
        "pkg/mid/__init__.py": "",
        "pkg/mid/a.py": "def f():\n    from ..high import thing\n    from . import b\n",
        "pkg/mid/b.py": "import pkg.mid.a\nfrom pkg import low\n",
        "pkg/high.py": "thing = 1\nfrom pkg.mid.b import x\n",
        "pkg/mid/c.py": "if TYPE_CHECKING:\n    from pkg.mid import d\n",  # for annotations: no circle
        "pkg/mid/d.py": "from pkg.mid import c\n",
        "pkg/stray.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    layers = {"pkg": 1, "pkg.low": 1, "pkg.mid": 2, "pkg.high": 3}
    found = imports(tmp_path, "pkg")
    assert unplaced(tmp_path, "pkg", layers) == ["pkg.stray"]
    assert upward(found, layers) == ["pkg/low.py:2 -> pkg.high (layer 1 -> 3)",
                                     "pkg/mid/a.py:2 -> pkg.high (layer 2 -> 3)"]
    assert cycles(found) == ["pkg.high, pkg.low, pkg.mid.a, pkg.mid.b: "
                             "pkg/high.py:2 -> pkg.mid.b; pkg/low.py:2 -> pkg.high; pkg/mid/a.py:2 -> pkg.high; "
                             "pkg/mid/a.py:3 -> pkg.mid.b; pkg/mid/b.py:1 -> pkg.mid.a; pkg/mid/b.py:2 -> pkg.low"]
