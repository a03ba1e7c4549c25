"""A guard that writes to fds 1 and 2 as native code does: a banner as its module is imported,
and lines during each call, from C, from print and from a child process."""

import os
import subprocess

from hg_common import ALLOW

os.write(1, b"BANNER written to fd 1 at import\n")
print("banner printed at import")


def writes(inp):
    print("printed", inp.call_id)
    os.write(1, b"fd 1 " + inp.call_id.encode() + b"\n")
    os.write(2, b"fd 2 " + inp.call_id.encode() + b"\n")
    subprocess.run(["echo", "from a child"], check=True)
    return ALLOW
