"""A guard whose module blocks as it is imported once the first call has flagged it (its source
unchanged), and one that edits its own module so that importing it blocks."""

import os
import time

from hg_common import ALLOW, DIR, once

if (DIR / "block-import").exists():
    time.sleep(3600)


def flags_then_dies(inp):
    if once("flagged"):
        (DIR / "block-import").write_text("")
        os._exit(3)      # its worker dies: the retry needs a fresh one
    return ALLOW


def edits_then_dies(inp):
    if once("edited"):
        with open(__file__, "a") as f:
            f.write("\n(DIR / f'imported-edited-{os.getpid()}').write_text('')\ntime.sleep(3600)\n")
        os._exit(3)
    return ALLOW
