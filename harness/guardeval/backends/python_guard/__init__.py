"""The `python` back-end: a guard that is a Python function (docs/design.md §8).

What a guard function receives and may return is public and stable (`GuardInput`, `Verdict`,
also exported by `guardeval.api`); `backend` and `resolve` are the machinery behind it.
"""

from guardeval.backends.python_guard.types import FIELDS, GuardInput, Verdict

__all__ = ["FIELDS", "GuardInput", "Verdict"]
