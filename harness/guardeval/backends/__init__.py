"""Guard back-ends (openrouter, openai-compatible, mlx, sim) and strict parsers."""
