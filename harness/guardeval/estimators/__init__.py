"""Estimator stage (docs/design.md §10): paired effects, placebo correction, stratified cluster
bootstrap, Holm, failure rules, quarantine, accuracy against labels, run comparison, audits."""

from guardeval.estimators.core import estimate, exit_status

__all__ = ["estimate", "exit_status"]
