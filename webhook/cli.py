"""The `gpu-share-webhook` command line: subcommands live in `webhook.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from webhook import __version__

# Subcommand modules, in the order `--help` lists them.
COMMANDS = ("serve", "mutate", "policy", "discover", "certs", "render")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-share-webhook",
        description="Admission webhook that makes shared NVIDIA GPUs safe and transparent.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"webhook.commands.{name}").register(subparsers)
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
