"""Thin command-line layer: parse arguments, call the library, map errors to exit codes.

Each command family lives in its own module in this package exposing `register(subparsers)`; handlers
return an exit code. Messages go to stderr; with `--json`, stdout carries only the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from guardeval.errors import GuardevalError, os_error_text
from guardeval.terminal import safe

# Order is the order of `guardeval --help`.
COMMAND_MODULES = (
    "guardeval.cli.run",
    "guardeval.cli.study",
    "guardeval.cli.preflight",
    "guardeval.cli.estimate",
    "guardeval.cli.plan",
    "guardeval.cli.view",
    "guardeval.cli.audit",
    "guardeval.cli.cohort",
    "guardeval.cli.prompts",
    "guardeval.cli.models",
    "guardeval.cli.sim",
)


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the text already says it or there is
    none worth saying (a flag, or no default)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (not action.option_strings or "default" in text or action.nargs == 0
                or any(action.default is v for v in (None, False, argparse.SUPPRESS)) or action.default == ""):
            return text
        return text + " (default: %(default)s)"


class _Version(argparse.Action):
    """`--version`: the version is read from the package metadata only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from guardeval import __version__

        print(f"guardeval {__version__}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        # A prefix of an option is a typo, not a request: `--rep 3` must not quietly mean `--reps 3`.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # argparse hands a subcommand's unknown options up to the top parser, which would print
        # the top-level usage; here the subcommand that got them prints its own.
        self._given = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str) -> NoReturn:  # usage errors: exit 2, no traceback
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {safe(message)}", file=sys.stderr)
        for hint in self._typos():
            print(f"{self.prog}: {safe(hint)}", file=sys.stderr)
        raise SystemExit(2)

    def _typos(self) -> list[str]:
        """`--cohrt demo` fails as "required: --cohort"; name the typo and the closest option.
        Only a parser without subcommands knows its options (the top one would see the
        subcommand's options as unknown)."""
        if self._subparsers is not None:
            return []
        import difflib

        known = [s for s in self._option_string_actions if s.startswith("--")]
        hints = []
        for token in getattr(self, "_given", []):
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if name.startswith("--") and len(name) > 2 and name not in self._option_string_actions:
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                if close:
                    hints.append(f"unknown option {name}: did you mean {close[0]}?")
        return hints


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="guardeval", description="Asynchronous guard-evaluation harness.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


class Terminated(BaseException):
    """SIGTERM outside dispatch (planning, the preflight, writing the run folder): unwinds like
    Ctrl-C, so that a partial folder is removed and a lock released, instead of a silent -15.
    The dispatcher takes the signal over while it runs and stops the run cleanly itself."""


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated()


@contextlib.contextmanager
def _stdout_for_json_only(on: bool) -> Iterator[None]:
    """With --json, standard output carries the JSON alone, whatever else writes to fd 1 (a
    python guard's module printing a banner from C as it is imported, its child processes):
    while the command runs, fd 1 is stderr, and `sys.stdout` writes to a private copy of the
    real standard output. Nothing changes when stdout is not fd 1 (a caller's capture)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        fd = -1
    if not on or fd != 1:
        yield
        return
    saved = sys.stdout
    saved.flush()
    real = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(real, "w", encoding=saved.encoding, errors=saved.errors, closefd=False,
                           buffering=1 if saved.line_buffering else -1)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        sys.stdout = saved
        os.dup2(real, 1)
        os.close(real)


def main(argv: Sequence[str] | None = None) -> int:
    import signal

    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)   # what a study records as the command run
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        with _stdout_for_json_only(bool(getattr(args, "json", False))):
            return int(args.func(args) or 0)
    except Terminated:
        # Exit 1 as for any interrupted work (docs/design.md §11); nothing half-written is kept.
        print("guardeval: stopped by SIGTERM before any call was sent; nothing half-written was kept",
              file=sys.stderr)
        return 1
    except GuardevalError as exc:
        # Messages quote files, configs and providers: control characters are shown, not obeyed.
        print(f"guardeval: {safe(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("guardeval: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:
        # A file a command had to read or write (a report on a full disk, a folder it may not
        # write): which one and why, exit 1, no traceback.
        print(f"guardeval: {safe(os_error_text(exc))}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    raise SystemExit(main())
