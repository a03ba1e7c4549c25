"""Guards whose return value, unpickled, would run code: it ends the process that unpickles it."""

import json
import os

from hg_common import ALLOW


class Ends:
    def __reduce__(self):
        return (os._exit, (5,))


class EndsDict(dict):
    def __reduce__(self):
        return (os._exit, (5,))


def returns_an_exit(inp):
    return Ends()


def returns_a_dict_that_exits(inp):
    return EndsDict(json.loads(ALLOW))
