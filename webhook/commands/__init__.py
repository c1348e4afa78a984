"""The subcommands of `gpu-share-webhook`, one module each.

Each module has `register(subparsers)`, which adds its parser and sets `func` to a callable
taking the parsed arguments and returning the exit code. Every option has an environment
variable, `GPU_SHARE_WEBHOOK_<NAME>`, read through `env_default` so `--help` shows both.
"""

from __future__ import annotations

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


def policies_directory(option: str | None) -> tuple[Path, str]:
    """The policy directory to use, and where it came from: the option, else `./policies`
    when there is one, else the policies shipped with the package."""
    if option:
        return Path(option), "--policies"
    local = Path("policies")
    if local.is_dir():
        return local, "./policies"
    return policies.embedded_directory(), "the policies shipped with the package"
