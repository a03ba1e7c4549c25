"""Guards that end their process: os._exit, and a crash of the interpreter."""

import ctypes
import os

from hg_common import ALLOW, once


def exits(inp):
    if once("ended"):
        os._exit(7)
    return ALLOW


def crashes(inp):
    if once("ended"):
        ctypes.string_at(0)
    return ALLOW
