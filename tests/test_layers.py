"""The package layout is the pipeline: no module imports from a layer above its own (docs/design.md §2)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Top to bottom; a layer may import only from layers below it (and from itself).
# harness.api (the public Python API) sits between the CLI, which calls it, and the view.
LAYERS = ["harness.cli", "harness.api", "harness.view", "harness.estimators", "harness.run", "harness.cohorts", "guards", "ground"]
ALLOWED_UP = {("harness/__main__.py", "harness.cli")}   # the `python -m harness` entry point


def layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "guards":
        return "guards"
    if parts[0] != "harness":
        return None
    if len(parts) > 1 and f"harness.{parts[1]}" in LAYERS:
        return f"harness.{parts[1]}"
    return "ground"


def imported(tree: ast.AST) -> list[str]:
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    files = sorted((REPO / "harness").rglob("*.py")) + sorted((REPO / "guards").rglob("*.py"))
    assert len(files) > 50
    for f in files:
        rel = f.relative_to(REPO).as_posix()
        own = layer(".".join(f.relative_to(REPO).with_suffix("").parts))
        assert own is not None
        for mod in imported(ast.parse(f.read_text(encoding="utf-8"))):
            target = layer(mod)
            if target is None or (rel, target) in ALLOWED_UP:
                continue
            if LAYERS.index(target) < LAYERS.index(own):
                upward.append(f"{rel} imports {mod} ({target} is above {own})")
    assert upward == []


def _module_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, at the top or inside a function alike."""
    files = sorted((REPO / "harness").rglob("*.py")) + sorted((REPO / "guards").rglob("*.py"))
    names = {".".join(f.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): f for f in files}
    graph: dict[str, set[str]] = {}
    for name, f in names.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & names.keys()
                deps |= subs or ({node.module} & names.keys())
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names} & names.keys()
        graph[name] = deps - {name}
    return graph


def test_no_import_circle():
    # A circle (even through an import inside a function) means the modules are one job split
    # in two: whoever changes one must read the other.
    graph = _module_graph()
    circles = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for dep in sorted(graph[node]):
                if dep == start:
                    circles.append(" -> ".join([*path, start]))
                elif dep not in seen and dep > start:   # each circle once, from its least module
                    seen.add(dep)
                    stack.append((dep, [*path, dep]))
    assert circles == []
