"""The command-line shell over the library: one module per command family, `app` ties them."""

from guardeval.cli.app import main

__all__ = ["main"]
