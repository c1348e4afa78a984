"""`gpu-share-webhook policy check [DIR]`: validate policy files."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook import policies
from webhook.commands import (
    EXIT_FAILED,
    EXIT_OK,
    env_default,
    help_text,
    policies_directory,
)
from webhook.errors import PolicyError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("policy", help="work with policy files")
    sub = parser.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    check = sub.add_parser(
        "check",
        help="validate the policies in a directory",
        description="Validate every policy in DIR; print each problem as file: field: reason.",
    )
    check.add_argument(
        "directory",
        nargs="?",
        metavar="DIR",
        default=env_default("policies", "") or None,
        help=help_text(
            "directory of policy files",
            "policies",
            "./policies if it exists, else the policies shipped with the package",
        ),
    )
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    directory, _ = policies_directory(args.directory)
    try:
        loaded = policies.load_directory(directory)
    except PolicyError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        count = len(exc.problems)
        print(f"{directory}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        return EXIT_FAILED
    for name in loaded.names:
        p = loaded.policies[name]
        classes = ", ".join(c.name for c in p.classes)
        print(f"ok: policy {name} ({p.source}): classes {classes}")
    return EXIT_OK
