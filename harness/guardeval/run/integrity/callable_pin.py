"""The pin on a python guard's code (docs/design.md §8): what launch records, what resume and
verify compare.

`manifest.guard_callable` is the launch's provenance of the callable (name, defining module,
distribution and version, source SHA-256; `guardeval.backends.python_guard.resolve`). `resume` imports the
callable and refuses (exit 2) when its provenance differs, unless told (`--allow-changed-callable`:
the run then mixes code; every attempt's response names the code that answered it). `verify`
(and `report`, `estimate`, `export`, which verify first) hashes the source file again and
reports a mismatch as a problem. It finds the file as plain files on this machine's Python path
(`resolve.locate`), never importing, running or `find_spec`-ing anything: a run folder may be a
stranger's, and its manifest names the module. A module not found that way is a skipped check,
"callable source not checked here", saying what to set when the guard is merely off PYTHONPATH.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from guardeval.backends.backend import find_backend
from guardeval.backends.config import GuardConfig
from guardeval.backends.python_guard import resolve
from guardeval.errors import InputError

FIELD = "guard_callable"


def record(config: GuardConfig, where: object = None, beside: str | None = None) -> dict[str, Any] | None:
    """The provenance to pin at launch (None for other back-ends). InputError (exit 2) naming the
    config's `callable` field when it does not import or is not callable. The module is also
    looked for beside the config file (or in `beside`: a resumed run's recorded folder)."""
    if not config.backend_entry.takes_callable or config.callable is None:
        return None
    fn = resolve.load(config.callable, where=where if where is not None else config.source,
                      beside=beside or resolve.config_folder(config.source))
    return resolve.provenance(config.callable, fn)


def check_resume(manifest_path: Path, manifest: dict[str, Any], config: GuardConfig, *,
                 allow_changed: bool = False) -> dict[str, Any] | None:
    """Before a resume sends anything: the callable imports, and it is the launch's code.
    Returns its provenance now (None for other back-ends)."""
    if not config.backend_entry.takes_callable:
        return None
    pin = manifest.get(FIELD)
    beside = pin.get("beside_config") if isinstance(pin, dict) else None
    now = record(config, where=manifest_path, beside=beside if isinstance(beside, str) else None)
    assert now is not None
    changed = resolve.changes(manifest.get(FIELD), now)
    if changed and not allow_changed:
        raise InputError(f"the guard's callable {config.callable} changed since launch ({'; '.join(changed)}): "
                         "its answers would not be the launch's guard. Restore it, resume with "
                         "--allow-changed-callable (the run then mixes code; each attempt records which), or start "
                         "a new run with `guardeval replicate`", path=manifest_path, field=FIELD)
    return now


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
