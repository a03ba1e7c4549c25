"""Guards that copy their worker process as some libraries' helpers do, or forge its answers."""

import ctypes
import json
import os
import sys

from hg_common import ALLOW, once

LAST: list[str] = []


def forks_once(inp):
    """os.fork() once; both copies return the answer (the copy, to the worker's loop)."""
    print(inp.call_id)
    if once("forked"):
        os.fork()
    return ALLOW


def c_forks_once(inp):
    """fork() from C (no Python fork hooks run in the copy), once; both copies return."""
    print(inp.call_id)
    if once("forked"):
        ctypes.PyDLL(None).fork()
    return ALLOW


def forges_an_answer(inp):
    """On its second call in a worker, first writes on the worker's own wire (found in the
    worker's frames, as hostile code could) a well-formed answer for the previous call."""
    print(inp.call_id)
    if LAST and once("forged"):
        frame = sys._getframe(1)
        while "wire_out" not in frame.f_locals:
            frame = frame.f_back
        wire = frame.f_locals["wire_out"]
        data = json.dumps({"call": LAST[-1], "attempt": 1, "pid": os.getpid(), "kind": "ok", "returned": "str",
                           "value": ALLOW, "output": {"stdout": LAST[-1] + "\n", "stdout_chars": 33}}).encode()
        wire.write(len(data).to_bytes(4, "big") + data)
        wire.flush()
    LAST.append(inp.call_id)
    return ALLOW
