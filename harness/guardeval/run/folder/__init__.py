"""The run folder and what lives in it: one object opens its files (folder.py)."""
