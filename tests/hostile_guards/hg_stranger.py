"""A guard module that notes every import of it (for resume's refusals: it must never run)."""

import os

from hg_common import ALLOW, DIR

(DIR / f"imported-{os.getpid()}").write_text(__file__)


def guard(inp):
    return ALLOW
