"""Cohort builders: each turns a source into frozen base x condition rows (DESIGN §4)."""
