"""The pin on a python guard's code (docs/design.md §8): what launch records, what resume and
verify compare.

`manifest.guard_callable` is the launch's provenance of the callable (name, defining module,
distribution and version, source SHA-256; `guardeval.backends.python_guard.resolve`). `resume` finds
the module's source file, hashes it and refuses (exit 2) before importing anything when it is not
the launch's, unless told (`--allow-changed-callable`: the run then mixes code; every attempt's
response names the code that answered it); it then imports the module from the bytes it hashed,
never from inside the run folder (a manifest naming a folder there is refused first). `verify`
(and `report`, `estimate`, `export`, which verify first) hashes the source file again and
reports a mismatch as a problem. It finds the file as plain files on this machine's Python path
(`resolve.locate`), never importing, running or `find_spec`-ing anything: a run folder may be a
stranger's, and its manifest names the module. A module not found that way is a skipped check,
"callable source not checked here", saying what to set when the guard is merely off PYTHONPATH.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Final

from guardeval.backends.backend import find_backend
from guardeval.backends.config import GuardConfig
from guardeval.backends.python_guard import resolve
from guardeval.errors import InputError
from guardeval.run.folder.manifest import RunManifest

FIELD: Final = "guard_callable"


def record(config: GuardConfig, where: object = None, beside: str | None = None) -> resolve.Provenance | None:
    """The provenance to pin at launch (None for other back-ends). InputError (exit 2) naming the
    config's `callable` field when it does not import or is not callable. The module is also
    looked for beside the config file (or in `beside`: a resumed run's recorded folder)."""
    if not config.backend_entry.takes_callable or config.callable is None:
        return None
    fn = resolve.load(config.callable, where=where if where is not None else config.source,
                      beside=beside or resolve.config_folder(config.source))
    return resolve.provenance(config.callable, fn)


def check_resume(manifest_path: Path, manifest: RunManifest, config: GuardConfig, *,
                 allow_changed: bool = False) -> resolve.Provenance | None:
    """Before a resume sends anything: the callable's module is the launch's code, checked
    before it is imported, then imported from the bytes hashed (`resolve.import_source`: no
    second read of the file); the callable imports. Returns its provenance now (None for other
    back-ends). InputError (exit 2), nothing imported, when the pin is missing or names a folder
    inside the run folder, when the module's source is not found as a file, or lies inside the
    run folder, or when its SHA-256 is not the launch's (unless `allow_changed`)."""
    if not config.backend_entry.takes_callable:
        return None
    run_dir = os.path.realpath(manifest_path.parent)
    pin = manifest.get(FIELD)
    beside = pin.get("beside_config") if isinstance(pin, dict) else None
    if beside is not None and (not isinstance(beside, str) or not os.path.isabs(beside)
                               or _inside(beside, run_dir)):
        raise InputError("the run's manifest says its guard's module lies in a folder inside the run folder "
                         f"({_said(beside)}): a run folder holds data, never code to run; guardeval refuses to "
                         "import it. Resume only runs whose guard you have", path=manifest_path,
                         field=f"{FIELD}.beside_config")
    module = pin.get("module") if isinstance(pin, dict) else None
    if not isinstance(pin, dict) or not isinstance(module, str) or resolve.name_problem(f"{module}:x") is not None:
        if not allow_changed:
            raise InputError(f"the run records no provenance of its callable {config.callable}, so its code cannot "
                             "be checked before it is imported; resume with --allow-changed-callable to run it "
                             "anyway", path=manifest_path, field=FIELD)
        now = record(config, where=manifest_path)
        assert now is not None
        return now
    found = resolve.read_source(module, beside) or _found_by_import_system(module)
    if found is None:
        there = f" nor in {_said(beside)}" if isinstance(beside, str) else ""
        raise InputError(f"cannot check the guard's module {module} before importing it: its source file is not "
                         f"found on this machine's Python path{there} (a run's guard is imported only once its "
                         "SHA-256 matches the launch's). Set PYTHONPATH to the folder that holds it, or install its "
                         "package", path=manifest_path, field=FIELD)
    path, data, sha256 = found
    if _inside(path, run_dir):
        raise InputError(f"the guard's module {module} would be imported from inside the run folder ({_said(path)}): "
                         "a run folder holds data, never code to run; guardeval refuses to import it",
                         path=manifest_path, field=FIELD)
    if sha256 != pin.get("source_sha256") and not allow_changed:
        raise InputError(f"the guard's callable {config.callable} changed since launch (source SHA-256 "
                         f"{pin.get('source_sha256')} -> {sha256}; not imported): its answers would not be the "
                         "launch's guard. Restore it, resume with --allow-changed-callable (the run then mixes code; "
                         "each attempt records which), or start a new run with `guardeval replicate`",
                         path=manifest_path, field=FIELD)
    if isinstance(beside, str) and _inside(path, os.path.realpath(beside)):
        resolve.use_beside(beside)
    try:
        resolve.import_source(module, path, data)
    except BaseException as exc:  # noqa: BLE001 - as `resolve.load` reports any failure of the user's module
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise InputError(f"cannot import module '{module}': {type(exc).__name__}: {str(exc)[:300]}",
                         path=manifest_path, field="callable") from None
    now = record(config, where=manifest_path, beside=beside if isinstance(beside, str) else None)
    assert now is not None
    changed = resolve.changes(manifest.get(FIELD), now)
    if changed and not allow_changed:
        raise InputError(f"the guard's callable {config.callable} changed since launch ({'; '.join(changed)}): "
                         "its answers would not be the launch's guard. Restore it, resume with "
                         "--allow-changed-callable (the run then mixes code; each attempt records which), or start "
                         "a new run with `guardeval replicate`", path=manifest_path, field=FIELD)
    return now


def _inside(path: str, folder: str) -> bool:
    real = os.path.realpath(path)
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


def _said(value: object) -> str:
    return str(value)[:200]   # the CLI shows control characters, never obeys them


def _found_by_import_system(module: str) -> tuple[str, bytes, str] | None:
    """A top-level module only an import hook finds (an editable install): its source file as
    the hook names it, found without running any module's code (a top-level lookup imports no
    parent package)."""
    if "." in module:
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if not isinstance(origin, str) or not origin.endswith(".py"):
        return None
    return resolve.read_path(origin)


def verify_findings(manifest: dict[str, Any]) -> tuple[list[str], str | None]:
    """(problems, skipped reason) of a python guard's pin against the source found here now."""
    guard = manifest.get("guard")
    entry = find_backend(guard.get("backend")) if isinstance(guard, dict) else None
    if entry is None or not entry.takes_callable:
        return [], None
    pin = manifest.get(FIELD)
    if not isinstance(pin, dict) or not isinstance(pin.get("module"), str):
        return [f"{FIELD}: a python guard's run records no provenance of its callable"], None
    module = pin["module"]
    if resolve.name_problem(f"{module}:x") is not None:
        return [f"{FIELD}.module: not a module name"], None
    beside = pin.get("beside_config")
    # The folder the launch found the module in, beside its config: looked in as plain files only.
    now = resolve.source_sha256(module, beside if isinstance(beside, str) else None)
    if now is None:
        return [], not_found_here(module, beside if isinstance(beside, str) else None)
    if now != pin.get("source_sha256"):
        return [f"{FIELD}: the source of {module} no longer matches the launch (SHA-256 {pin.get('source_sha256')} "
                f"recorded, {now} now): the run's answers came from other code; `resume` refuses it without "
                "--allow-changed-callable"], None
    return [], None


def not_found_here(module: str, beside: str | None = None) -> str:
    """Why the callable's source was not compared, and what to set when it is merely off the path."""
    top = module.partition(".")[0]
    holds = f"{top}.py" if top == module else f"the {top}/ package"
    there = f" nor in {beside}, beside the guard config where the launch found it," if beside else ""
    return (f"callable source not checked here: module {module} is not found on this machine's Python path{there} "
            "(guardeval looks for its file without importing it, so no code a run folder names runs). If it "
            f"is your guard and only off the path, set PYTHONPATH to the folder that holds {holds} "
            f"(PYTHONPATH=/that/folder guardeval verify RUN) or install its package; for a run from elsewhere, "
            "--allow-skipped accepts the check as not done")
