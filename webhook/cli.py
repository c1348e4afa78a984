"""The `gpu-share-webhook` command line: subcommands live in `webhook.commands`.

Every command exits 0 when all is well, 1 when something is refused or a problem is found (or
a step fails), and 2 for bad input or usage (`commands.EXIT_*`). A bad option or a bad value
in a command's environment variable is a usage error: one line on stderr, exit 2
(`commands.Parser`). Only the command being run reads its variables. Ctrl-C is 130, as a
shell reports it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from webhook import __version__
from webhook.commands import (
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
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _REGISTER:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(func(args))
    except KeyboardInterrupt:
        return 130
    except RecursionError:
        # Only input nests this deep here (the readers refuse what they cannot parse; a
        # value orjson reads, up to 1,024 levels, can still be too deep to copy or walk).
        print(
            f"error: {args.command}: the input is nested too deeply to process",
            file=sys.stderr,
        )
        return EXIT_USAGE
