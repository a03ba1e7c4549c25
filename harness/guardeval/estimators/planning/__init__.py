"""Planning a design from a pilot, and its simulation check."""
