"""Guard back-ends (each declared by one line of `DECLARED` in backend.py) and strict parsers."""
