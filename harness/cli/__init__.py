"""The command-line shell over the library: one module per command family, `app` ties them."""

from harness.cli.app import main

__all__ = ["main"]
