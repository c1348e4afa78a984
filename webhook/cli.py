"""The `gpu-share-webhook` command line: subcommands live in `webhook.commands`.

A bad option or a bad value in a command's environment variable is a usage error: one line
on stderr, exit 2 (`commands.Parser`). Only the command being run reads its variables.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from webhook import __version__
from webhook.commands import Parser, audit, certs, discover, explain, mutate, policy, render, serve

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
        return 2
    try:
        return int(func(args))
    except KeyboardInterrupt:
        return 130
