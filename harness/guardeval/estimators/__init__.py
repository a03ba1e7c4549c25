"""Estimator stage (docs/design.md §10): paired effects, placebo correction, stratified cluster
bootstrap, Holm, failure rules, quarantine, accuracy against labels, run comparison, audits."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["estimate", "exit_status"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: a light module of this package (the decision record the API's types
    # name) must not bring numpy and scipy into `guardeval status` or `verify`.
    if name in __all__:
        return getattr(importlib.import_module("guardeval.estimators.core"), name)
    raise AttributeError(f"module 'guardeval.estimators' has no attribute {name!r}")
