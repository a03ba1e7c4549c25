"""Presenting a run: the call rows joined across the run folder (`calls`), the export frame
(`export`), one call's story for a terminal (`show`) and the self-contained report.html
(`html`, with its script and style in `assets/`). Reads run folders and report.json; never
writes anything a later stage reads."""
