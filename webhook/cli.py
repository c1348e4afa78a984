"""The `gpu-share-webhook` command line: subcommands live in `webhook.tools`.

Every command exits 0 when all is well, 1 when something is refused or a problem is found (or
a step fails), and 2 for bad input or usage (`commands.EXIT_*`). A bad option or a bad value
in a command's environment variable is a usage error: one line on stderr, exit 2
(`commands.Parser`). Only the command being run reads its variables. Ctrl-C is 130, as a
shell reports it. When the reader of the output goes away (`... | head`), the command stops
quietly with 141, what a shell reports for a program that SIGPIPE ended (128 + 13): Python
ignores SIGPIPE, so a write to a closed pipe is a BrokenPipeError, which `main` catches once
for every command.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import sys
from collections.abc import Sequence

from webhook import __version__
from webhook.tools import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Parser,
    audit,
    certs,
    discover,
    explain,
    mutate,
    policy,
    render,
    serve,
)

EPILOG = (
    "Exit codes: 0 ok; 1 something refused or a problem found; 2 bad input or usage;"
    " 130 Ctrl-C; 141 the reader of the output went away (`| head`), as for SIGPIPE."
)

# Each adds its command's parser; `--help` lists the commands in this order.
_REGISTER = (
    serve.register,
    mutate.register,
    audit.register,
    policy.register,
    discover.register,
    explain.register,
    certs.register,
    render.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gpu-share-webhook",
        description="Admission webhook that makes shared NVIDIA GPUs safe and transparent.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _REGISTER:
        register(subparsers)
    return parser


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The parser `main` uses, built once per process: parsing changes nothing in it, the
    defaults from the environment are read at each parse, and each parse gives lists of its
    own (`tools.Parser`)."""
    return build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    _buffer_stdout()
    try:
        try:
            return _run(argv)
        finally:
            # The last of the output is written here, not at the interpreter's exit, so that
            # a reader gone is seen here too (`--help` and usage errors included).
            sys.stdout.flush()
    except BrokenPipeError:
        _discard_output()
        return EXIT_BROKEN_PIPE


def _buffer_stdout() -> None:
    """Under `python -u` (PYTHONUNBUFFERED) stdout writes straight to a raw file, which may
    take only part of what it is given and say nothing of the rest: a reader gone midway
    would cut the output short with exit 0. A buffered writer writes it all, or fails."""
    original = sys.__stdout__
    if original is None or sys.stdout is not original:
        return  # not the process's own stdout (a test's capture)
    raw = getattr(original, "buffer", None)
    if isinstance(raw, io.RawIOBase):
        # Its own file object on the descriptor: the raw one stays open whatever happens
        # to this one.
        unclosed = io.FileIO(raw.fileno(), "w", closefd=False)
        sys.stdout = io.TextIOWrapper(
            io.BufferedWriter(unclosed), encoding=original.encoding, errors=original.errors
        )


def _discard_output() -> None:
    """Point stdout at /dev/null, so that the interpreter's own flush at exit, with what is
    still buffered, does not fail again (Python's documented recipe for SIGPIPE)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture): nothing is flushed at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _run(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except RecursionError:
        # Only input nests this deep here (the readers refuse what they cannot parse; a
        # value orjson reads, up to 1,024 levels, can still be too deep to copy or walk).
        print(
            f"error: {args.command}: the input is nested too deeply to process",
            file=sys.stderr,
        )
        return EXIT_USAGE
