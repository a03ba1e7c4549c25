"""Cohort builders: each turns a source into frozen base x condition rows (docs/design.md §4)."""
