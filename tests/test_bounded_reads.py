"""Small files an outsider controls (a run's manifest.json and report.json, configs, pin lists)
are read up to a bound: a huge one is refused naming it, never loaded (harness/guardeval/bounded.py)."""

from __future__ import annotations

import json
import os

import pytest

from guardeval.bounded import read_bounded
from guardeval.errors import InputError
from guardeval.run.folder.manifest import MAX_MANIFEST_BYTES

from conftest import run_cli

pytestmark = pytest.mark.slow


def test_read_bounded(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 10)
    assert read_bounded(p, 10, what="a thing") == b"x" * 10
    with pytest.raises(InputError, match="larger than 9 bytes: not a thing"):
        read_bounded(p, 9, what="a thing")
    with pytest.raises(InputError, match="cannot read"):
        read_bounded(tmp_path / "missing", 10, what="a thing")
    with pytest.raises(InputError, match="is not a regular file"):
        read_bounded(tmp_path, 10, what="a thing")
    # Opened non-blocking and checked once open: a FIFO is refused, never waited on.
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="is not a regular file"):
        read_bounded(tmp_path / "fifo", 10, what="a thing")


def _pad(path, size: int) -> None:
    """Keep the file valid JSON but make it `size` bytes: trailing whitespace."""
    data = path.read_bytes()
    path.write_bytes(data + b" " * (size - len(data)))


def test_a_huge_manifest_is_refused_by_every_reader(copy_run):
    run = copy_run()
    _pad(run / "manifest.json", MAX_MANIFEST_BYTES + 1)
    for argv in (["status", str(run)], ["estimate", str(run), "--no-verify"], ["export", str(run)],
                 ["resume", str(run), "--no-progress"]):
        r = run_cli(*argv)
        assert r.code == 2 and f"larger than {MAX_MANIFEST_BYTES} bytes: not a run manifest" in r.err, (argv, r.err)
        assert "Traceback" not in r.err
    r = run_cli("verify", str(run), "--json")
    assert r.code == 1 and "not a run manifest" in r.out and json.loads(r.out)["ok"] is False
    # At the bound it is read as before (verify then finds the padding changed nothing it pins).
    (run / "manifest.json").write_bytes((run / "manifest.json").read_bytes().rstrip() + b"\n")
    assert run_cli("status", str(run)).code == 0


def test_a_huge_report_is_refused_by_report(copy_run):
    from guardeval.view.html import MAX_REPORT_BYTES

    run = copy_run()
    assert run_cli("estimate", str(run)).code == 0
    _pad(run / "report.json", MAX_REPORT_BYTES + 1)
    r = run_cli("report", str(run))
    assert r.code == 2 and f"larger than {MAX_REPORT_BYTES} bytes: not a guardeval report" in r.err
    assert "Traceback" not in r.err
