"""Guards that start processes of their own and leave them running: one in the worker's group,
one in a session of its own, one orphaned into a session of its own (its parent shell exits)."""

import ctypes
import os
import subprocess

from hg_common import ALLOW, DIR, note, once


def _spawn() -> None:
    note("in-group", subprocess.Popen(["sleep", "1000"]).pid)
    note("own-session", subprocess.Popen(["sleep", "1000"], start_new_session=True).pid)
    out = subprocess.run(["sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"], capture_output=True,
                         text=True, check=True).stdout
    note("orphan", int(out))


def spawns(inp):
    if once("spawned"):
        _spawn()
    return ALLOW


def spawns_then_blocks(inp):
    if once("spawned"):
        _spawn()
        (DIR / "blocking").write_text(str(os.getpid()))
        ctypes.CDLL(None).sleep(3600)
    return ALLOW
