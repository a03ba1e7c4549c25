"""The package layout is the pipeline: no module imports from a layer above its own (docs/design.md §2)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from guardeval.backends.backend import DECLARED, builtin_names

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "harness"   # the folder that holds the package (a module's name is its path below it)

# Top to bottom; a layer may import only from layers below it (and from itself).
# guardeval.api (the public Python API) sits between the CLI, which calls it, and the view;
# guardeval.study (several runs as one study) below the API: it dispatches runs, estimates and
# compares them and writes its report through the view.
LAYERS = ["guardeval.cli", "guardeval.api", "guardeval.study", "guardeval.view", "guardeval.estimators",
          "guardeval.run", "guardeval.cohorts", "guardeval.backends", "ground"]
ALLOWED_UP = {("harness/guardeval/__main__.py", "guardeval.cli")}   # the `python -m guardeval` entry point
# `import guardeval as ge; ge.launch(...)`: the package's own names are the API's, loaded on first use.
ALLOWED_UP |= {("harness/guardeval/__init__.py", "guardeval.api")}


@functools.cache
def engine_modules() -> tuple[tuple[str, ast.AST], ...]:
    """Every module of the engine: its path from the repository root and its tree, parsed once."""
    return tuple((f.relative_to(REPO).as_posix(), ast.parse(f.read_text(encoding="utf-8")))
                 for f in sorted((REPO / "harness" / "guardeval").rglob("*.py")))


def layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "guardeval":
        return None
    if len(parts) > 1 and f"guardeval.{parts[1]}" in LAYERS:
        return f"guardeval.{parts[1]}"
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
    files = sorted((REPO / "harness" / "guardeval").rglob("*.py"))
    assert len(files) > 50
    for f in files:
        rel = f.relative_to(REPO).as_posix()
        own = layer(".".join(f.relative_to(SRC).with_suffix("").parts))
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
    files = sorted((REPO / "harness" / "guardeval").rglob("*.py"))
    names = {".".join(f.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__"): f for f in files}
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


# -- the run folder is opened by one object (issue 19 §1) ---------------------------------------
# What opens, reads, writes, lists or probes a file by its path. Where a run folder's files are
# concerned, only `harness/guardeval/run/folder/folder.py` (RunFolder) may do these: it opens the folder once and
# every file relative to it, never through a link, only regular files, every read bounded.
PATH_CALLS = {"open", "read_bounded", "read_json", "file_sha256", "write_atomically"}
OS_CALLS = {"os.open", "os.fdopen", "os.scandir", "os.listdir", "mmap.mmap"}
PATH_METHODS = {"read_bytes", "read_text", "write_bytes", "write_text", "iterdir", "rglob", "glob", "touch",
                "symlink_to", "is_file", "exists"}
# The layers that handle run folders, and the few places in them that open files that are not
# a run folder's (each with its reason). Anything else there that opens a path fails this test.
RUN_LAYERS = ("harness/guardeval/run/", "harness/guardeval/view/", "harness/guardeval/estimators/", "harness/guardeval/cli/",
              "harness/guardeval/study/")
OPENS_ELSEWHERE = {
    "harness/guardeval/cli/app.py:_stdout_for_json_only": "a copy of the standard output's descriptor, not a file",
    "harness/guardeval/run/folder/folder.py": "RunFolder: the one place a run folder's files are opened",
    # The runs folder around a new run; the new run itself is built through RunFolder.
    "harness/guardeval/run/folder/create.py:build_beside": "opens the parent folder that the partial folder is made in",
    "harness/guardeval/run/folder/create.py:check_new_run_dir": "probes the path the user named for the new run",
    "harness/guardeval/run/folder/create.py:_make_parents": "makes the missing parents of that path",
    "harness/guardeval/run/folder/create.py:remove_stale_partials": "lists the partial folders of dead launches beside it",
    "harness/guardeval/run/folder/create.py:_partial_is_live": "tries a partial folder's lock (never through a link)",
    "harness/guardeval/run/integrity/verify_raw.py:_write_facts": "the worker's own anonymous temporary file",
    "harness/guardeval/view/files.py:write_atomically": "an --out file the user named, outside any run folder",
    "harness/guardeval/view/files.py:out_folder": "an --out folder the user named (compare), outside any run folder",
    "harness/guardeval/view/html.py:asset": "the package's own CSS and JS",
    "harness/guardeval/view/html.py:_write": "report.html (or the page saying why there is none) to an --out file the user named",
    "harness/guardeval/estimators/table.py": "estimate --table FILE: a decision table, not a run folder",
    "harness/guardeval/estimators/audits.py": "audit inputs (--table files)",
    "harness/guardeval/cli/cohort.py": "cohort build/inspect: cohort folders and source files",
    "harness/guardeval/cli/prompts.py": "prompt import: a template file and the prompts folder",
    "harness/guardeval/cli/estimate.py:cmd_estimate": "the hash of an --table file",
    "harness/guardeval/cli/plan.py:cmd_plan": "the hash of an --table file",
    "harness/guardeval/estimators/runs.py:compare_input_from_table": "the hash of a compare --table file",
    "harness/guardeval/cli/demo.py:_estimate": "the path of the report.html the demo just wrote, for its message",
    "harness/guardeval/run/inspect_task.py:_settings": "an exported Inspect task's own task.json and dataset.jsonl",
}
RUN_NAMES = {"MANIFEST", "SCHEDULE", "STIMULI", "RAW", "DECISIONS", "EVENTS", "LOCK", "COHORT_DIR", "PROMPT_DIR",
             "REPORT_JSON", "REPORT_MD", "EFFECTS_PNG", "REPORT_HTML", "COMPARE_MD", "COMPARE_HTML", "COMPARE_PNG",
             "LEADERBOARD_PNG"}
RUN_FILES = {"manifest.json", "schedule.jsonl", "stimuli.jsonl", "raw.jsonl", "decisions.jsonl", "events.jsonl",
             ".lock", "cohort", "prompt", "report.json", "report.md", "effects.png", "report.html", "compare.md",
             "compare.html", "compare.png", "leaderboard.png"}


class Scoped(ast.NodeVisitor):
    """A visitor that knows the function (or class) it is in: `where`, dotted; '' at module level."""

    def __init__(self) -> None:
        self.stack: list[str] = []

    @property
    def where(self) -> str:
        return ".".join(self.stack)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef  # type: ignore[assignment]


def _path_uses(tree: ast.AST) -> list[tuple[str, str, int]]:
    """(enclosing function, what, line) of every call that opens or probes a path, and of every
    path joined to a run file's name (`run / RAW`, `run / "report.json"`)."""
    found: list[tuple[str, str, int]] = []

    def name_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name) and node.id in RUN_NAMES:
            return node.id
        if isinstance(node, ast.Constant) and node.value in RUN_FILES:
            return repr(node.value)
        return None

    class Visitor(Scoped):

        def visit_Call(self, node: ast.Call) -> None:
            fn, what = node.func, None
            if isinstance(fn, ast.Name) and fn.id in PATH_CALLS:
                what = fn.id
            elif isinstance(fn, ast.Attribute):
                dotted = f"{fn.value.id}.{fn.attr}" if isinstance(fn.value, ast.Name) else None
                if dotted in OS_CALLS:
                    what = dotted
                elif fn.attr in PATH_METHODS:
                    what = "." + fn.attr
            if what:
                found.append((self.where, what, node.lineno))
            self.generic_visit(node)

        def visit_BinOp(self, node: ast.BinOp) -> None:
            if isinstance(node.op, ast.Div) and (joined := name_of(node.right)):
                found.append((self.where, f"/ {joined}", node.lineno))
            self.generic_visit(node)

    Visitor().visit(tree)
    return found


def test_only_the_run_folder_object_opens_a_run_folders_files():
    offenders = []
    for rel, tree in engine_modules():
        if not rel.startswith(RUN_LAYERS) or rel in OPENS_ELSEWHERE:
            continue
        for where, what, line in _path_uses(tree):
            if f"{rel}:{where}" not in OPENS_ELSEWHERE:
                offenders.append(f"{rel}:{line} ({where or 'module'}): {what}")
    assert offenders == [], "open run-folder files through guardeval.run.folder.folder.RunFolder:\n" + "\n".join(offenders)


def test_the_run_folder_rule_catches_what_it_forbids():
    # The rule above is only as good as its detector: each way of reaching a run file is seen.
    src = ("def f(run, name):\n"
           "    open(run / RAW)\n    (run / 'report.json').write_text('x')\n    os.open(name, 0)\n"
           "    mmap.mmap(3, 0)\n    read_json(run, 1, what='x')\n    (run / MANIFEST).is_file()\n")
    whats = {what for _, what, _ in _path_uses(ast.parse(src))}
    assert whats == {"open", "/ RAW", "/ 'report.json'", ".write_text", "os.open", "mmap.mmap", "read_json",
                     "/ MANIFEST", ".is_file"}


# -- a back-end is its own module (issue 38 §4) ---------------------------------------------------
# Only the registry and the back-ends' own modules name a back-end; elsewhere its record is asked
# (config.backend_entry, guardeval.backends.backend.backend_for), so adding one edits nothing else.
BACKEND_NAMES = frozenset(builtin_names())


def _declaring_home(module: str) -> str:
    """A declaring module's home: its package when it is the package's `backend` or `entry`
    module (backends/openrouter/), else its own file."""
    path = "harness/" + module.replace(".", "/")
    package, _, last = path.rpartition("/")
    return package + "/" if last in ("backend", "entry") else path + ".py"


# The registry, each declared back-end's home, mlx's guard beside its declaring module, and the
# simulated provider (a stand-in for OpenRouter's servers).
BACKEND_MODULES = ("harness/guardeval/backends/backend.py", "harness/guardeval/backends/mlx_backend.py",
                   "harness/guardeval/backends/sim/", *sorted(_declaring_home(m) for m in DECLARED.values()))
# The same words meaning something else (file:function -> what it is).
OTHER_MEANINGS = {
    "harness/guardeval/study/report.py:versions": "the Python interpreter's version",
    "harness/guardeval/view/study.py:made_lines": "the Python interpreter's version, shown",
    "harness/guardeval/study/record.py:command": "the interpreter's command line",
}


def _backend_names_used(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(enclosing function, line, what) of every comparison of `backend` with a back-end's name and
    of every other string constant that is one."""
    found: list[tuple[str, int, str]] = []
    compared: set[int] = set()

    def names(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in BACKEND_NAMES
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(names(e) for e in node.elts)

    def is_backend(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "backend") or \
            (isinstance(node, ast.Attribute) and node.attr == "backend")

    class Visitor(Scoped):

        def visit_Compare(self, node: ast.Compare) -> None:
            sides = [node.left, *node.comparators]
            if any(is_backend(s) for s in sides) and any(names(s) for s in sides):
                found.append((self.where, node.lineno, f"backend compared with {ast.unparse(node)}"))
                compared.update(id(n) for s in sides for n in ast.walk(s))
            self.generic_visit(node)

        def visit_Constant(self, node: ast.Constant) -> None:
            if node.value in BACKEND_NAMES and id(node) not in compared:
                found.append((self.where, node.lineno, f"back-end name {node.value!r}"))

    Visitor().visit(tree)
    return found


def test_no_backend_name_outside_the_registry_and_the_backends_own_modules():
    offenders = []
    for rel, tree in engine_modules():
        if rel.startswith(BACKEND_MODULES):
            continue
        for where, line, what in _backend_names_used(tree):
            if f"{rel}:{where}" not in OTHER_MEANINGS:
                offenders.append(f"{rel}:{line} ({where or 'module'}): {what}")
    assert offenders == [], "ask the back-end's record (guardeval.backends.backend) instead:\n" + "\n".join(offenders)


def test_the_backend_name_rule_catches_what_it_forbids():
    src = ("def f(config, backend):\n"
           "    if config.backend == 'mlx':\n        pass\n"
           "    if backend in ('openrouter', 'openai-compatible'):\n        pass\n"
           "    if 'python' != config.backend:\n        pass\n"
           "    return {'backend': 'python'}\n")
    assert [(line, what.split(" ")[0]) for _, line, what in _backend_names_used(ast.parse(src))] == \
        [(2, "backend"), (4, "backend"), (6, "backend"), (8, "back-end")]


# -- OpenRouter's rules are its package's (issue 49 §2) ---------------------------------------------
# Outside backends/openrouter/ no code names OpenRouter: no import of its package, no identifier
# or key-like string (no whitespace: a header, a raw-line key, a module) containing "openrouter",
# and none of its routing table's keys. Words for a person (help, messages, definitions,
# docstrings, comments) may say "OpenRouter": they name the service, they decide nothing.
OPENROUTER_PACKAGE = "guardeval.backends.openrouter"
OPENROUTER_HOME = ("harness/guardeval/backends/openrouter/",
                   # the simulated provider: a stand-in for OpenRouter's servers, not a rule guardeval applies
                   "harness/guardeval/backends/sim/")
OPENROUTER_KEYS = frozenset({"allow_fallbacks", "require_parameters", "data_collection"})


def _openrouter_knowledge(tree: ast.AST, declared_ok: bool = False) -> list[tuple[int, str]]:
    """(line, what) of every import of OpenRouter's package, identifier naming it, and key-like
    string naming it or one of its routing table's keys. `declared_ok`: the registry's DECLARED
    (the one registration line) is not counted."""
    skip: set[int] = set()
    found: list[tuple[int, str]] = []

    def names_it(text: str) -> bool:
        return "openrouter" in text.lower() or text in OPENROUTER_KEYS

    for node in ast.walk(tree):
        if declared_ok and isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                isinstance(t, ast.Name) and t.id == "DECLARED"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            mods = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(m == OPENROUTER_PACKAGE or m.startswith(OPENROUTER_PACKAGE + ".") for m in mods):
                found.append((node.lineno, f"imports {node.module}"))
        elif isinstance(node, ast.Import) and any(a.name.startswith(OPENROUTER_PACKAGE) for a in node.names):
            found.append((node.lineno, "imports " + ", ".join(a.name for a in node.names)))
        elif isinstance(node, ast.Name) and names_it(node.id):
            found.append((node.lineno, f"name {node.id}"))
        elif isinstance(node, ast.Attribute) and names_it(node.attr):
            found.append((node.lineno, f"attribute .{node.attr}"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and names_it(node.name):
            found.append((node.lineno, f"definition {node.name}"))
        elif isinstance(node, ast.arg) and names_it(node.arg):
            found.append((node.lineno, f"argument {node.arg}"))
        elif isinstance(node, ast.keyword) and node.arg and names_it(node.arg):
            found.append((node.value.lineno, f"keyword {node.arg}="))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and not any(c.isspace() for c in node.value) and names_it(node.value):
            found.append((node.lineno, f"string {node.value!r}"))
    return sorted(found)


def test_no_openrouter_rule_outside_its_package():
    offenders = []
    for rel, tree in engine_modules():
        if rel.startswith(OPENROUTER_HOME):
            continue
        for line, what in _openrouter_knowledge(tree, declared_ok=rel == "harness/guardeval/backends/backend.py"):
            offenders.append(f"{rel}:{line}: {what}")
    assert offenders == [], ("OpenRouter's rules live in backends/openrouter/, reached through its back-end record "
                             "(guardeval.backends.backend):\n" + "\n".join(offenders))


def test_the_openrouter_rule_catches_what_it_forbids():
    src = ("from guardeval.backends.openrouter.errors import REFUSED_PREFIX\n"
           "from guardeval.backends import openrouter\n"
           "def f(reply, rec, p):\n"
           "    rec['openrouter_metadata'] = reply.router_metadata\n"
           "    headers = {'X-OpenRouter-Cache': 'false'}\n"
           "    if p.get('allow_fallbacks') is False:\n        pass\n"
           '    """OpenRouter\'s words in a docstring are words."""\n'
           "    raise ValueError(\"OpenRouter's generation stats\")\n"
           "DECLARED = {'openrouter': 'guardeval.backends.openrouter.backend'}\n")
    tree = ast.parse(src)
    assert [line for line, _ in _openrouter_knowledge(tree)] == [1, 2, 4, 5, 6, 10, 10]
    assert [line for line, _ in _openrouter_knowledge(tree, declared_ok=True)] == [1, 2, 4, 5, 6]


def test_the_generic_decision_step_imports_no_backends_routing():
    # OpenRouter's checks (cache hits, router stages, provider drift) are its back-end's hook
    # (Backend.quarantine); decide calls whichever back-end's it is given.
    graph = _module_graph()
    assert not {m for m in graph["guardeval.run.dispatch.decide"] if m.startswith("guardeval.backends.openrouter")}


# -- a run is opened one way: `guardeval.run.Run.open` (issue 38 §2) -------------------------------
# Only the Run module and the run folder's own modules construct a RunFolder; the few others
# open folders that are not runs (each with its reason).
MAKES_RUN_FOLDERS = ("harness/guardeval/run/run.py", "harness/guardeval/run/folder/")
NOT_A_RUN = {"harness/guardeval/study/record.py:open_study": "a study folder (study.json), not a run"}
# The openers Run replaced, by the module that held them: importing one is opening a run another way.
# `opened` (a path or a RunFolder as a RunFolder, with no "not a run folder" check) was the last:
# a module handed a path opens it with `Run.using`, and a study opens its runs with
# `guardeval.study.record.open_run` (a Run). Calling something named `opened` is forbidden too,
# however it was reached (`folder.opened(...)`, a module imported whole).
DELETED_OPENERS = {"guardeval.api.runs": {"run_folder"}, "guardeval.cli.run": {"_existing_run"},
                   "guardeval.estimators.runs": {"open_run", "run_dir"},
                   "guardeval.run.folder.manifest": {"manifest_json"},
                   "guardeval.run.folder.folder": {"opened"}, "guardeval.study.record": {"run_folder"}}
DELETED_CALLS = {"opened"}


def _other_openers(rel: str, tree: ast.AST) -> list[str]:
    found: list[str] = []

    class Visitor(Scoped):

        def visit_Call(self, node: ast.Call) -> None:
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
            if name == "RunFolder" and f"{rel}:{self.where}" not in NOT_A_RUN:
                found.append(f"{rel}:{node.lineno}: RunFolder(...)")
            elif name in DELETED_CALLS:
                found.append(f"{rel}:{node.lineno}: {name}(...)")
            self.generic_visit(node)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            for a in node.names:
                if a.name in DELETED_OPENERS.get(node.module or "", set()):
                    found.append(f"{rel}:{node.lineno}: imports {node.module}.{a.name}")

    Visitor().visit(tree)
    return found


def test_only_the_run_object_opens_a_run():
    offenders = [found for rel, tree in engine_modules() if not rel.startswith(MAKES_RUN_FOLDERS)
                 for found in _other_openers(rel, tree)]
    assert offenders == [], "open a run with guardeval.run.Run.open:\n" + "\n".join(offenders)


def test_the_one_opener_rule_catches_what_it_forbids():
    src = ("from guardeval.api.runs import run_folder\nfrom guardeval.estimators.runs import open_run, verified\n"
           "def f(p):\n    return RunFolder(p), folder.RunFolder(p)\n")
    assert _other_openers("x.py", ast.parse(src)) == [
        "x.py:1: imports guardeval.api.runs.run_folder", "x.py:2: imports guardeval.estimators.runs.open_run",
        "x.py:4: RunFolder(...)", "x.py:4: RunFolder(...)"]


def test_the_one_opener_rule_catches_the_old_opened():
    # `opened` went with issue 38 §2: imported from its module, or called however it was reached.
    src = ("from guardeval.run.folder.folder import RunFolder, opened\n"
           "from guardeval.run.folder import folder\nfrom guardeval.study.record import run_folder\n"
           "def f(p, study):\n    with opened(p) as a, folder.opened(p) as b:\n        return a, b\n"
           "def g(opened):\n    opened.append(1)\n    return opened.folder\n")
    assert _other_openers("x.py", ast.parse(src)) == [
        "x.py:1: imports guardeval.run.folder.folder.opened", "x.py:3: imports guardeval.study.record.run_folder",
        "x.py:5: opened(...)", "x.py:5: opened(...)"]


# -- every significance decision is made in verdicts/ (issue 49 §1) --------------------------------
# The decision layer sits below every surface that prints its records, and nothing else compares a
# p with α or runs Holm to decide (tests/test_one_rule.py checks the same behaviour at run time).
VERDICTS = "guardeval.estimators.verdicts"
PRESENTATION = ("guardeval.estimators.report", "guardeval.estimators.compare", "guardeval.view", "guardeval.study",
                "guardeval.api", "guardeval.cli")
# Holm-adjusted p-values printed beside the records (not decided on there), by the module.
HOLM_ELSEWHERE = {"guardeval.estimators.compare.compare": "the p_holm columns of the pair rows (p_holm, "
                  "p_holm_across_pairs, p_holm_all_pairs); their decisions are decide_family's records"}
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def test_the_decision_layer_imports_no_surface():
    graph = _module_graph()
    found = sorted(f"{m} imports {d}" for m, deps in graph.items() if m == VERDICTS or m.startswith(VERDICTS + ".")
                   for d in deps if any(d == p or d.startswith(p + ".") for p in PRESENTATION))
    assert found == [], "move what the decision layer needs down into it:\n" + "\n".join(found)


def _alpha_comparisons(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(enclosing function, line, the comparison) of every ordering comparison that involves α (a
    name `alpha`/`ALPHA`, an attribute `.alpha`, a key "alpha"): a decision made in place."""
    found: list[tuple[str, int, str]] = []

    def alpha(node: ast.AST) -> bool:
        return any((isinstance(n, ast.Name) and n.id in ("alpha", "ALPHA")) or
                   (isinstance(n, ast.Attribute) and n.attr == "alpha") or
                   (isinstance(n, ast.Constant) and n.value == "alpha") for n in ast.walk(node))

    class Visitor(Scoped):

        def visit_Compare(self, node: ast.Compare) -> None:
            if any(isinstance(op, ORDERING) for op in node.ops) and any(alpha(s) for s in [node.left, *node.comparators]):
                found.append((self.where, node.lineno, ast.unparse(node)))
            self.generic_visit(node)

    Visitor().visit(tree)
    return found


def test_no_significance_decision_outside_verdicts():
    offenders = [f"{rel}:{line} ({where or 'module'}): {what}" for rel, tree in engine_modules()
                 if not rel.startswith("harness/guardeval/estimators/verdicts/")
                 for where, line, what in _alpha_comparisons(tree)]
    graph = _module_graph()
    offenders += [f"{m} imports {VERDICTS}.holm" for m, deps in sorted(graph.items())
                  if f"{VERDICTS}.holm" in deps and not m.startswith(VERDICTS + ".") and m not in HOLM_ELSEWHERE]
    assert offenders == [], ("decide with guardeval.estimators.verdicts.decisions (decide_family, decide_pvalues, "
                             "decide_adjusted) and read its record:\n" + "\n".join(offenders))


def test_the_decision_rule_catches_what_it_forbids():
    src = ("def f(p, alpha, r, cfg):\n"
           "    a = p < alpha\n    b = r['p_holm'] is not None and r['p_holm'] <= 20 * alpha\n"
           "    c = cfg.alpha > p\n    d = p < r.get('alpha', 0.05)\n    e = p == alpha\n    return 0 < ALPHA < 0.5\n")
    assert [line for _, line, _ in _alpha_comparisons(ast.parse(src))] == [2, 3, 4, 5, 7]


# -- layers inside `run/` (issue 49 §5) -----------------------------------------------------------
# The run folder is the lowest floor of `run/`: the dispatcher writes through it and verify reads
# through it, so it may not import either (what both need, it holds: spend.py, workers.py, head.py).
RUN_FLOOR = "harness/guardeval/run/folder/"
ABOVE_THE_FLOOR = ("guardeval.run.dispatch", "guardeval.run.integrity")


def _imports_above_the_floor(tree: ast.AST) -> list[str]:
    """Every module of run/dispatch or run/integrity imported, at the top or inside a function
    (a package imported whole, `from guardeval.run import dispatch`, counts too)."""
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        hits = [n for n in names if any(n == p or n.startswith(p + ".") for p in ABOVE_THE_FLOOR)]
        if hits:
            found.append(f"{node.lineno}: {min(hits, key=len)}")
    return found


def test_the_run_folder_imports_neither_dispatch_nor_integrity():
    offenders = [f"{rel}:{hit}" for rel, tree in engine_modules() if rel.startswith(RUN_FLOOR)
                 for hit in _imports_above_the_floor(tree)]
    assert offenders == [], "run/folder/ is below run/dispatch/ and run/integrity/:\n" + "\n".join(offenders)


def test_the_run_floor_rule_catches_what_it_forbids():
    src = ("from guardeval.run.dispatch.budget import reported_cost\nfrom guardeval.run import integrity\n"
           "def f():\n    import guardeval.run.integrity.head\n    from guardeval.run.folder import spend\n")
    assert _imports_above_the_floor(ast.parse(src)) == [
        "1: guardeval.run.dispatch.budget", "2: guardeval.run.integrity", "4: guardeval.run.integrity.head"]


# -- a run is held by an owner (issue 49 §3) ------------------------------------------------------
# `Run.open(x)` dropped on the floor (`Run.open(x).folder`) leaves the folder to the garbage
# collector. A run opened in the package is a `with` item, entered into an ExitStack, or bound to a
# name that a `with` then holds; the few that hand their run on say to whom.
RUN_OPENERS = {"Run.open", "Run.using", "Run.inside", "open_run"}
HOLDERS = {
    "harness/guardeval/study/record.py:open_run": "returns the run to its caller's `with` (study/runs.py, status.py)",
    "harness/guardeval/api/runs.py:plan_replicate": "the replicate's plan holds its parent run; launch_plan closes it",
}


def _unowned_opens(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(enclosing function, line, opener) of every run opened without an owner."""
    found: list[tuple[str, int, str]] = []

    def opener(node: ast.AST) -> str | None:
        if not isinstance(node, ast.Call):
            return None
        fn = node.func
        name = (f"{fn.value.id}.{fn.attr}" if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name)
                else fn.id if isinstance(fn, ast.Name) else None)
        return name if name in RUN_OPENERS else None

    class Visitor(Scoped):

        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
            # Owned: a `with` item; an ExitStack's enter_context(...); a name bound to the run
            # that a `with` of the same function then holds.
            owned: set[int] = set()
            bound: dict[int, str] = {}
            held_names: set[str] = set()
            for sub in ast.walk(node):
                if isinstance(sub, (ast.With, ast.AsyncWith)):
                    for item in sub.items:
                        owned.add(id(item.context_expr))
                        if isinstance(item.context_expr, ast.Name):
                            held_names.add(item.context_expr.id)
                elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                        and sub.func.attr == "enter_context":
                    owned.update(id(a) for a in sub.args)
                elif isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
                    bound[id(sub.value)] = sub.targets[0].id
            self.stack.append(node.name)
            for sub in ast.walk(node):
                what = opener(sub)
                if what and id(sub) not in owned and bound.get(id(sub)) not in held_names:
                    found.append((self.where, sub.lineno, what))
            self.stack.pop()
            # Nested functions are walked above with their parent's owners: not again.

        visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

        def visit_ClassDef(self, node: ast.ClassDef) -> None:
            self.stack.append(node.name)
            self.generic_visit(node)
            self.stack.pop()

    Visitor().visit(tree)
    return sorted(found, key=lambda f: f[1])


def test_every_run_opened_in_the_package_has_an_owner():
    offenders = []
    for rel, tree in engine_modules():
        if rel == "harness/guardeval/run/run.py":
            continue
        for where, line, what in _unowned_opens(tree):
            if f"{rel}:{where}" not in HOLDERS:
                offenders.append(f"{rel}:{line} ({where or 'module'}): {what}(...) with no owner")
    assert offenders == [], "hold a run with `with Run.using(...) as run:` and pass the Run down:\n" + "\n".join(offenders)


def test_the_run_owner_rule_catches_what_it_forbids():
    src = ("def f(p, study, stack):\n"
           "    a = Run.open(p).folder\n"                       # dropped: flagged
           "    with Run.using(p) as b, open_run(study, 'x') as c:\n        pass\n"
           "    d = stack.enter_context(Run.open(p))\n"
           "    e = Run.open(p)\n    with e:\n        pass\n"
           "    g = Run.inside(study, 'runs/x')\n"               # bound, never held: flagged
           "    return [Run.open(q) for q in p]\n")              # a list of runs nobody closes: flagged
    assert [(line, what) for _, line, what in _unowned_opens(ast.parse(src))] == [
        (2, "Run.open"), (9, "Run.inside"), (10, "Run.open")]


# -- the report reaches the view one way (issue 49 §3) ---------------------------------------------
# report.html reads the presentation model (`estimators/report/presentation.py`, built once from
# report.json); it calls none of the builders behind it. From these modules the view may import
# types (a CamelCase name: a table's cells, a Section), never a module or a function.
BUILDERS = ("guardeval.estimators.report.report", "guardeval.estimators.report.sections",
            "guardeval.estimators.report.rows", "guardeval.estimators.excluded")


def _builders_reached(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                dotted = f"{node.module}.{a.name}"
                if dotted in BUILDERS or (node.module in BUILDERS and not a.name[:1].isupper()):
                    found.append(f"{node.lineno}: {dotted}")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: {a.name}" for a in node.names if a.name in BUILDERS]
    return found


def test_the_view_reads_the_presentation_model_not_its_builders():
    offenders = [f"{rel}:{hit}" for rel, tree in engine_modules() if rel.startswith("harness/guardeval/view/")
                 for hit in _builders_reached(tree)]
    assert offenders == [], "read guardeval.estimators.report.presentation instead:\n" + "\n".join(offenders)


def test_the_one_way_rule_catches_what_it_forbids():
    src = ("from guardeval.estimators.report import rows, sections as S\n"
           "from guardeval.estimators.report.report import decision_lines, dumps_json\n"
           "from guardeval.estimators.report.rows import Est, effects_table\n"
           "from guardeval.estimators.excluded import publishable\nimport guardeval.estimators.report.sections\n"
           "from guardeval.estimators.report.presentation import Presentation, presentation\n")
    assert _builders_reached(ast.parse(src)) == [
        "1: guardeval.estimators.report.rows", "1: guardeval.estimators.report.sections",
        "2: guardeval.estimators.report.report.decision_lines", "2: guardeval.estimators.report.report.dumps_json",
        "3: guardeval.estimators.report.rows.effects_table", "4: guardeval.estimators.excluded.publishable",
        "5: guardeval.estimators.report.sections"]


def test_the_estimators_never_reach_the_view():
    # Below the view, nothing imports it, at the top or inside a function, nor names it to importlib.
    offenders = []
    for rel, tree in engine_modules():
        if not rel.startswith("harness/guardeval/estimators/"):
            continue
        offenders += [f"{rel}: imports {m}" for m in imported(tree) if m.startswith("guardeval.view")]
        offenders += [f"{rel}:{n.lineno}: names {n.value!r}" for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("guardeval.view")]
    assert offenders == []
