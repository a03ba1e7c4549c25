"""Hardening round 3 (issue 36), the Inspect logs: a FIFO or a folder named as a log is refused at
once; a `.eval` whose zip directory lies about its sizes is refused within the stated memory
bound (docs/inspect.md, "Reading a log"). The archives are written here, byte by byte."""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import pytest

from conftest import REPO, cli_env, run_cli
from inspect_env import offline_tiktoken, require_inspect

pytestmark = pytest.mark.slow


# 3. A FIFO or a folder named as an Inspect log is refused at once, naming it (exit 2).
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_fifo_or_folder_named_as_an_inspect_log_is_refused_at_once(tmp_path, kind):
    require_inspect()
    log = tmp_path / "f.eval"
    if kind == "fifo":
        os.mkfifo(log)
    else:
        log.mkdir()
    for args in (["cohort", "build", "inspect", str(log), "--out", str(tmp_path / "c")],
                 ["estimate", "--inspect-log", str(log)]):
        r = run_cli(*args, timeout=60)
        assert r.code == 2 and f"{log}: is not a regular file" in r.err and "Traceback" not in r.err, r.err
    assert not (tmp_path / "c").exists()


def _zstd_zeros(n_blocks: int) -> bytes:
    """A zstd frame of `n_blocks` RLE blocks of 128 KiB zeros each: 4 bytes a block (written
    here, byte by byte, from the zstd format: RFC 8878)."""
    block = 128 << 10
    head = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 0x38])   # no content size; window 128 KiB
    last = [(i == n_blocks - 1) | (1 << 1) | (block << 3) for i in range(n_blocks)]   # type 1: RLE
    return head + b"".join(h.to_bytes(3, "little") + b"\0" for h in last)


def _zip(members: list[tuple[str, bytes, int, int, int]], entries: int | None = None) -> bytes:
    """A zip written by hand, each member (name, data, method, claimed size, crc) as given, the
    directory saying whatever it is told (`entries`: the count its end record claims)."""
    body, central = b"", b""
    for name, data, method, claimed, crc in members:
        nb = name.encode()
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 63, 63, 0, method, 0, 0x21, crc, len(data),
                               claimed, len(nb), 0, 0, 0, 0, 0, len(body)) + nb
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 63, 0, method, 0, 0x21, crc, len(data), claimed,
                            len(nb), 0) + nb + data
    n = len(members) if entries is None else entries
    if n < 0xFFFF:
        return body + central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), len(body), 0)
    # More than a 16-bit count: the zip64 end record and its locator carry it.
    end64 = len(body) + len(central)
    return (body + central
            + struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 63, 63, 0, 0, n, n, len(central), len(body))
            + struct.pack("<IIQI", 0x07064B50, 0, end64, 1)
            + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, len(central), len(body), 0))


def _bounded_cli(args: list[str], as_bytes: int) -> tuple[int, str, int]:
    """`guardeval ARGS` in a process whose address space is capped; (exit code, stderr, its own
    peak RSS in bytes)."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))

    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "guardeval", *args], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, env=cli_env(), cwd=REPO, preexec_fn=cap)
        deadline = time.monotonic() + 120
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise AssertionError(f"guardeval {' '.join(args)} ran past 120 s")
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return proc.returncode, err.read().decode(errors="replace"), usage.ru_maxrss * 1024


# 2. No .eval, whatever its zip directory claims, takes a command past the stated memory bound.
def test_an_inspect_log_that_lies_about_its_sizes_is_refused_within_the_memory_bound(tmp_path):
    require_inspect()
    zeros = _zstd_zeros(4 * 8192)                                # 4 GiB of zeros in 128 KiB
    bomb = tmp_path / "bomb.eval"
    bomb.write_bytes(_zip([("header.json", zeros, 93, 100, zlib.crc32(bytes(100)))]))
    honest = tmp_path / "honest.eval"                            # says what it holds: too much
    crc = 0
    for _ in range(300 * 8):
        crc = zlib.crc32(bytes(128 << 10), crc)
    honest.write_bytes(_zip([("header.json", _zstd_zeros(300 * 8), 93, 300 << 20, crc)]))
    crowded = tmp_path / "crowded.eval"                          # an end record claiming 300,000 members
    crowded.write_bytes(_zip([("header.json", b"{}", 0, 2, zlib.crc32(b"{}"))], entries=300_000))
    cases = [(bomb, "member 'header.json': it inflates to more than the 100 bytes the zip directory claims"),
             (honest, "the .eval zip unpacks to 300.0 MiB (314,572,800 bytes) (all members together), past guardeval's "
                      "limit of 256.0 MiB"),
             (crowded, "the .eval zip claims 300000 members, more than 200000")]
    for log, why in cases:
        assert log.stat().st_size < 200_000
        for args in (["cohort", "build", "inspect", str(log), "--out", str(tmp_path / "c")],
                     ["estimate", "--inspect-log", str(log)]):
            code, err, peak = _bounded_cli(args, 1 << 30)
            assert code == 2 and f"{log}: " in err and why in err and "Traceback" not in err, err[-2000:]
            assert peak < 400 << 20, f"{args[0]}: peak RSS {peak >> 20} MiB"
    assert not (tmp_path / "c").exists()


# 8. A full disk during `cohort build inspect` leaves no half-written cohort and names the file.
def test_a_full_disk_during_cohort_build_inspect_names_the_file_and_leaves_nothing(tmp_path):
    require_inspect()
    tiktoken = offline_tiktoken(tmp_path / "tiktoken")
    env = cli_env({"TIKTOKEN_CACHE_DIR": str(tiktoken), "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
                   "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"), "INSPECT_DISPLAY": "none"})
    proc = subprocess.run([sys.executable, "-m", "guardeval.cohorts.examples.inspect_agent", str(tmp_path / "logs")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (log,) = sorted((tmp_path / "logs").glob("*.eval"))
    out = tmp_path / "cohorts" / "c"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    proc = subprocess.run([sys.executable, "-m", "guardeval", "cohort", "build", "inspect", str(log), "--out", str(out)],
                          capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=300, preexec_fn=limit)
    assert proc.returncode == 1 and f"{out / 'instances.jsonl'}: file too large" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not os.path.lexists(out) and not list((tmp_path / "cohorts").iterdir())
    r = run_cli("cohort", "build", "inspect", str(log), "--out", str(out))
    assert r.code == 0 and (out / "cohort.json").exists(), r.err
