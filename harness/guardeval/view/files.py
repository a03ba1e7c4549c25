"""The files `report`, `export` and `compare` write: an `--out` file checked before any work,
and each file written beside its target and renamed into place (a reader never sees half a
file, and a failed write leaves nothing behind)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from guardeval.errors import InputError


def out_file(out: str | Path | None, default: Path) -> Path:
    """The file to write: `out` if given, else `default`. A folder, or a file in a folder that
    does not exist, is a usage error (exit 2), found before anything is computed or written."""
    target = Path(out) if out is not None else default
    if target.is_dir():
        raise InputError("is a folder; --out names the file to write", path=target)
    if not target.parent.is_dir():
        raise InputError("no such folder for the output file", path=target.parent)
    return target


def out_folder(out: str | Path) -> Path:
    """An `--out DIR` for several files: refused (exit 2) when it names something that is not a
    folder, found before any work; made (with its parents) when it does not exist yet, by the
    caller once there is something to write (`make_folder`)."""
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise InputError("not a folder", path=target, field="out")
    return target


def compare_folder(out: str | Path | None, runs: Sequence[Path]) -> Path:
    """Where `compare` writes: `--out DIR`, else a folder of its own beside the first run
    (`compare-A-B`, `compare-A-B-and-N-more`). Never a run folder: a run's folder holds that
    run's files, and a comparison is about several (exit 2, before any work)."""
    if out:
        target = out_folder(out)
    else:
        names = [r.name for r in runs[:2]] + ([f"and-{len(runs) - 2}-more"] if len(runs) > 2 else [])
        target = runs[0].parent / "-".join(["compare", *names])
        writable_beside(target, "compare.md, compare.html and compare.png")
    if _holds_run(target):
        raise InputError("holds a run: compare writes into a folder of its own (give --out another folder)",
                         path=target, field="out")
    return target


def report_folder(out: str | Path) -> Path:
    """`estimate RUN --out DIR`: the folder a run's reports go into instead of the run (a run on a
    read-only mount is estimated so). A folder of its own, never a run's: its report.json would
    then claim to be that run's (exit 2, before any work)."""
    target = out_folder(out)
    if _holds_run(target):
        raise InputError("holds a run: --out names a folder of its own for the reports (give another folder)",
                         path=target, field="out")
    return target


def writable_beside(folder: Path, what: str) -> None:
    """InputError (exit 2, before any work) when `what` would go into `folder`, beside a run, and
    this process cannot create it there (a read-only mount): `--out DIR` writes it elsewhere."""
    parent = next((p for p in (folder, *folder.parents) if p.is_dir()), None)
    if parent is not None and not os.access(parent, os.W_OK):
        raise InputError(f"is not writable (a read-only mount, or another user's folder), so {what} cannot go "
                         "there: name a folder for the outputs with --out DIR", path=parent, field="out")


def _holds_run(target: Path) -> bool:
    from guardeval.errors import GuardevalError
    from guardeval.run.run import Run

    if not target.is_dir():
        return False
    try:
        with Run.using(target):   # never through a link; InputError when it has no manifest.json
            return True
    except (GuardevalError, OSError):
        return False


def make_folder(target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    return target


def write_atomically(target: Path, write: Callable[[Path], object]) -> Path:
    """`write(tmp)` to a temporary name beside `target`, then rename it into place."""
    tmp = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target
