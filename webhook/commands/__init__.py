"""The subcommands of `gpu-share-webhook`, one module each.

Each module has `register(subparsers)`, which adds its parser and sets `func` to a callable
taking the parsed arguments and returning the exit code. Every option has an environment
variable, `GPU_SHARE_WEBHOOK_<NAME>`, read through `env_default` so `--help` shows both.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from webhook import policies

ENV_PREFIX = "GPU_SHARE_WEBHOOK_"

# Exit codes every command keeps to: 1 when a step fails (or, for `mutate`, something is
# refused), 2 for bad usage or input.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

# The names the rest of the project (deploy/, docs) agrees on.
DEFAULT_SERVICE = "gpu-share-webhook"
DEFAULT_NAMESPACE = "gpu-share-system"
DEFAULT_WEBHOOK_NAME = "gpu-share-webhook"


def env_name(name: str) -> str:
    """The environment variable for an option: `cert-dir` -> `GPU_SHARE_WEBHOOK_CERT_DIR`."""
    return ENV_PREFIX + name.upper().replace("-", "_")


def env_default(name: str, default: str) -> str:
    """The option's default: its environment variable when set, else `default`."""
    return os.environ.get(env_name(name), default)


def env_int(name: str, default: int) -> int:
    """Like `env_default` for whole numbers; a malformed value is reported by argparse."""
    raw = os.environ.get(env_name(name))
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(
            f"gpu-share-webhook: {env_name(name)}={raw!r} is not a whole number"
        ) from None


def env_float(name: str, default: float) -> float:
    """Like `env_default` for numbers."""
    raw = os.environ.get(env_name(name))
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"gpu-share-webhook: {env_name(name)}={raw!r} is not a number") from None


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def env_flag(name: str) -> bool:
    """A yes/no option's default from its environment variable (unset: no)."""
    raw = os.environ.get(env_name(name), "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise SystemExit(f"gpu-share-webhook: {env_name(name)}={raw!r} is not true or false")


def help_text(text: str, option: str, default: str = "%(default)s") -> str:
    """An option's help with its environment variable and default."""
    return f"{text} (env {env_name(option)}; default {default})"


def add_policies_argument(parser: argparse.ArgumentParser, help_first: str) -> None:
    """--policies DIR; read it with `policies_directory(args.policies)`."""
    parser.add_argument(
        "--policies",
        metavar="DIR",
        default=env_default("policies", "") or None,
        help=help_text(
            help_first,
            "policies",
            "./policies if it exists, else the policies shipped with the package",
        ),
    )


def add_workload_kinds_argument(parser: argparse.ArgumentParser) -> None:
    """--workload-kinds FILE; read it with `workload_kinds(args.workload_kinds)`."""
    parser.add_argument(
        "--workload-kinds",
        metavar="FILE",
        default=env_default("workload-kinds", "") or None,
        help=help_text(
            "workload kinds of other projects whose pod templates are reviewed"
            " (a WorkloadKinds file)",
            "workload-kinds",
            "the file shipped with the package: JobSet, LeaderWorkerSet, RayCluster, RayJob,"
            " RayService, PyTorchJob",
        ),
    )


def policies_directory(option: str | None) -> tuple[Path, str]:
    """The policy directory to use, and where it came from: the option, else `./policies`
    when there is one, else the policies shipped with the package."""
    if option:
        return Path(option), "--policies"
    local = Path("policies")
    if local.is_dir():
        return local, "./policies"
    return policies.embedded_directory(), "the policies shipped with the package"


def add_service_arguments(
    parser: argparse.ArgumentParser, *, service_help: str, namespace_help: str, san_help: str
) -> None:
    """--service, --namespace and --extra-san: the names a serving certificate is made for.

    Read the extra names with `extra_sans(args)`: their variable is a comma-separated list.
    """
    parser.add_argument(
        "--service",
        default=env_default("service", DEFAULT_SERVICE),
        help=help_text(service_help, "service"),
    )
    parser.add_argument(
        "--namespace",
        default=env_default("namespace", DEFAULT_NAMESPACE),
        help=help_text(namespace_help, "namespace"),
    )
    parser.add_argument(
        "--extra-san",
        action="append",
        metavar="NAME",
        default=None,
        help=f"{san_help}, repeatable (env {env_name('extra-san')}, comma-separated)",
    )


def extra_sans(args: argparse.Namespace) -> list[str]:
    """--extra-san as given, else its environment variable's comma-separated names."""
    if args.extra_san:
        return list(args.extra_san)
    raw = os.environ.get(env_name("extra-san"), "")
    return [item.strip() for item in raw.split(",") if item.strip()]
