"""Every exception class the package defines derives from `GuardevalError` (what the CLI turns into
an exit code) or is listed as internal in `guardeval.errors.INTERNAL`; `errors.py`'s docstring
draws the tree and names every one of them (issue 49 item 7)."""

from __future__ import annotations

import ast
import builtins
import importlib
import pkgutil
import re

import pytest

import guardeval
from guardeval import errors
from guardeval.errors import INTERNAL, GuardevalError

from conftest import REPO

pytestmark = pytest.mark.fast

PACKAGE = REPO / "harness" / "guardeval"


def _modules() -> list[str]:
    # `__main__` modules run a command when imported; they define no classes.
    return [m.name for m in pkgutil.walk_packages(guardeval.__path__, "guardeval.")
            if not m.name.endswith("__main__")]


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every BaseException subclass defined in the package, by `module.qualname`, after importing
    every module (a class is found however far down its family it sits)."""
    for name in _modules():
        importlib.import_module(name)
    found: dict[str, type[BaseException]] = {}
    todo: list[type[BaseException]] = [BaseException]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub.__module__ == "guardeval" or sub.__module__.startswith("guardeval."):
                found[f"{sub.__module__}.{sub.__qualname__}"] = sub
    return found


def test_the_walk_finds_the_classes_it_must() -> None:
    found = _exception_classes()
    assert {"guardeval.errors.InputError", "guardeval.backends.errors.AttemptError",
            "guardeval.cli.app.Terminated"} <= found.keys()


def test_every_exception_is_a_guardeval_error_or_internal() -> None:
    found = _exception_classes()
    outside = sorted(k for k, cls in found.items() if not issubclass(cls, GuardevalError) and k not in INTERNAL)
    assert not outside, ("exception classes neither under GuardevalError nor listed in guardeval.errors.INTERNAL "
                         f"(re-base them, or list and draw them in errors.py): {outside}")


def test_internal_lists_only_classes_that_exist_outside_the_tree() -> None:
    found = _exception_classes()
    stale = sorted(k for k in INTERNAL if k not in found)
    assert not stale, f"INTERNAL names classes that do not exist: {stale}"
    public = sorted(k for k in INTERNAL if issubclass(found[k], GuardevalError))
    assert not public, f"INTERNAL names GuardevalErrors, which reach the caller: {public}"


def test_the_docstring_draws_every_class() -> None:
    doc = errors.__doc__ or ""
    missing = []
    for key, cls in sorted(_exception_classes().items()):
        # Its name on a line of the tree, with its module on that line or a line above it.
        lines = [i for i, line in enumerate(doc.splitlines()) if re.search(rf"(?<![\w.]){re.escape(cls.__name__)}\b", line)]
        module = cls.__module__
        above = "\n".join(doc.splitlines()[:lines[0] + 1]) if lines else ""
        if not lines or (module != "guardeval.errors" and f"({module})" not in above):
            missing.append(key)
    assert not missing, f"errors.py's docstring does not draw: {missing}"


def test_no_exception_class_hides_inside_a_function() -> None:
    """The walk above sees classes defined at import; one defined inside a function would exist
    only once the function ran. The package defines none there (the AST says so)."""
    exception_names = {n for n, o in vars(builtins).items() if isinstance(o, type) and issubclass(o, BaseException)}
    exception_names |= {cls.__name__ for cls in _exception_classes().values()}
    nested = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ClassDef):
                        bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                                 for b in inner.bases}
                        if bases & exception_names:
                            nested.append(f"{path.relative_to(PACKAGE)}:{inner.lineno} {inner.name}")
    assert not nested, nested
