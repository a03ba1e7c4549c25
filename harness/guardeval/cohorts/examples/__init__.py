"""Small examples that make the inputs of a cohort builder (an Inspect agent log: `inspect_agent`)."""
