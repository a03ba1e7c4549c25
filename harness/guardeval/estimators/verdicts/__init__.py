"""The one rule behind every printed decision: Holm families, equivalence, power."""
