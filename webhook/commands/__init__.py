"""The subcommands of `gpu-share-webhook`, one module each.

Each module has `register(subparsers)`, which adds its parser and sets `func` to a callable
taking the parsed arguments and returning the exit code. Every option has an environment
variable, `GPU_SHARE_WEBHOOK_<NAME>`, read through `env_default` so `--help` shows both.
"""

from __future__ import annotations

import os

ENV_PREFIX = "GPU_SHARE_WEBHOOK_"

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
