"""The simulated provider: an OpenRouter-style server on loopback with a shortcut-prone guard.

`guard` decides, `config` holds the options, `server` serves them, `process` runs a server in a
child process (`SimServerProcess`), `__main__` is `python -m guardeval.backends.sim`.
"""

from guardeval.backends.sim.process import SimServerProcess

__all__ = ["SimServerProcess"]
