"""A run on a read-only mount (an archive, a colleague's share, a published replication folder)
is verified, estimated, compared and exported, its outputs going to a folder the user names
(`--out`); without one, the command says the run folder is not writable before any work
(issue 47 §1).

The mount is real: each command runs in its own mount namespace (`unshare`), where the archive
folder is bind-mounted onto itself read-only, so nothing the command does can write there, root
or not. Where namespaces cannot be made (a container without them), the tests skip saying so."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CliResult, cli_env, run_cli, write_guard

pytestmark = pytest.mark.slow

# $0: the folder made read-only (in this namespace only); the rest: the command.
_RO = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def _read_only(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["unshare", "--map-root-user", "--mount", "sh", "-c", _RO, str(folder), *argv],
                          capture_output=True, text=True, env=cli_env(), timeout=300)


def _ro_cli(folder: Path, *args: str) -> CliResult:
    proc = _read_only(folder, sys.executable, "-m", "guardeval", *args)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def archive(tmp_path: Path, finished_run: Path, sim) -> Path:
    """A folder of two runs of one schedule (a run and its replicate), to be mounted read-only."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1): a read-only mount needs a mount namespace of its own")
    probe = tmp_path / "probe"
    probe.mkdir()
    proc = _read_only(probe, "sh", "-c", f"! touch {probe}/x")
    if proc.returncode != 0:
        pytest.skip(f"cannot bind-mount a folder read-only in a mount namespace here: {proc.stderr.strip()[:200]}")
    folder = tmp_path / "archive"
    folder.mkdir()
    shutil.copytree(finished_run, folder / "a")
    guard = write_guard(tmp_path / "other.toml", sim.base_url, name="other")
    r = run_cli("replicate", str(folder / "a"), "--guard", str(guard), "--run-dir", str(folder / "b"), "--no-progress",
                env={"GUARDEVAL_TEST_KEY": "sk-test-key-0123"})
    assert r.code == 0, r.err
    for lock in folder.glob("*/.lock"):
        lock.unlink()
    return folder


def test_a_read_only_run_is_estimated_compared_and_exported_into_a_named_folder(archive: Path,
                                                                                  tmp_path: Path) -> None:
    before = _tree(archive)
    a, b, out = archive / "a", archive / "b", tmp_path / "out"
    assert _ro_cli(archive, "verify", str(a)).code == 0
    assert _ro_cli(archive, "status", str(a)).code == 0

    # Without --out: said at once, naming the folder and the way round, no traceback.
    for args in (["estimate", str(a), "--bootstrap", "200"], ["compare", str(a), str(b), "--bootstrap", "200"],
                 ["export", str(a)]):
        r = _ro_cli(archive, *args)
        assert r.code == 2 and "Traceback" not in r.err, (args, r.err)
        assert "not writable" in r.err and "--out DIR" in r.err, (args, r.err)

    r = _ro_cli(archive, "estimate", str(a), "--bootstrap", "200", "--out", str(out / "estimate"))
    assert r.code == 0, r.err
    written = {p.name for p in (out / "estimate").iterdir()}
    assert {"report.json", "report.md", "effects.png", "report.html"} <= written, written
    assert json.loads((out / "estimate" / "report.json").read_text())["source"]["run"] == str(a)

    r = _ro_cli(archive, "compare", str(a), str(b), "--bootstrap", "200", "--out", str(out / "compare"))
    assert r.code == 0, r.err
    assert (out / "compare" / "compare.html").is_file()

    r = _ro_cli(archive, "export", str(a), "--out", str(out))
    assert r.code == 0, r.err
    assert len((out / "calls.csv").read_text().splitlines()) == 81

    assert _tree(archive) == before   # nothing written into the archive, by any command


def test_reports_never_go_into_another_run(archive: Path) -> None:
    # `--out` names a folder of its own: another run's folder would get a report.json that is not its own.
    r = run_cli("estimate", str(archive / "a"), "--bootstrap", "200", "--out", str(archive / "b"))
    assert r.code == 2 and "holds a run" in r.err, r.err
    assert not (archive / "b" / "report.json").exists()
