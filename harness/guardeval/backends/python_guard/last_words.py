"""What is said when a guard run inside guardeval (`isolation = "thread"`) ends the process
(issue 46): Python cannot stop a guard that calls `os._exit` or crashes the interpreter, and
guardeval then ends with the guard's exit code or signal. It can still say so.

While python guards run in this process, `os._exit` is a stand-in that, called inside a guard
call (the call's `Capture` is current: a plain function's worker thread, an `async def` call's
task), first writes on stderr which guard ended the process and how to go on; and
`faulthandler` is on (unless it already was), so a segfault or an abort prints Python's fatal
error and every thread's stack, the guard's frames among them. Such guards belong in
`isolation = "process"`, where the same ends are one failed attempt (docs/how-to/python-guard.md).
"""

from __future__ import annotations

import faulthandler
import os
import sys
from typing import NoReturn

from guardeval.backends.python_guard import output

_REAL_EXIT = os._exit


def _exit(status: int) -> NoReturn:
    capture = output.current()
    if capture is not None:
        text = (f"guardeval: the python guard {capture.guard or '(unnamed)'} called os._exit({status!r}) during a call; "
                'with isolation = "thread" it runs inside guardeval, which ends with it. Every finished attempt is '
                'on disk: `guardeval resume RUN` goes on. A guard that may end its process belongs in '
                'isolation = "process", where this is one failed attempt.\n')
        try:
            os.write(2, text.encode("utf-8", "replace"))
        except OSError:
            pass
    _REAL_EXIT(status)


class LastWords:
    """Installed while thread-isolated python guards are open (counted: nested guards share it)."""

    _users = 0
    _faulthandler = False    # enabled by us (then disabled by us)

    @classmethod
    def install(cls) -> None:
        if cls._users == 0:
            os._exit = _exit
            stderr = sys.__stderr__
            if not faulthandler.is_enabled() and stderr is not None:
                try:
                    faulthandler.enable(file=stderr, all_threads=True)
                    cls._faulthandler = True
                except (AttributeError, ValueError, OSError):   # a stderr with no descriptor
                    pass
        cls._users += 1

    @classmethod
    def remove(cls) -> None:
        cls._users = max(0, cls._users - 1)
        if cls._users == 0:
            if os._exit is _exit:
                os._exit = _REAL_EXIT
            if cls._faulthandler:
                faulthandler.disable()
                cls._faulthandler = False
