"""What `serve` can be told: `Settings`, each field a flag and an environment variable."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from webhook.policy import names
from webhook.server import certificates

# Aliased: `Settings.limits` is a field of that name.
from webhook.server import limits as limits_module

# Whole answers kept per process (`reviews.Answers`, which also stops at
# `reviews.ANSWERS_MAX_BYTES`, 8 MiB): the pods of 2048 Deployments at once.
CACHE_SIZE = 2048


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything `serve` can be told; each field has a flag and an environment variable."""

    policies_dir: Path
    cert_dir: Path = Path("certs")
    # Loopback unless told (`serve --host`): plain-HTTP /metrics is not for every network a
    # laptop joins. A pod is told 0.0.0.0 (deploy/, the chart's listenAddress).
    host: str = "127.0.0.1"
    port: int = 8443
    metrics_port: int = 8080
    # The Service the API server calls: the names the serving certificate is made for.
    service: str = names.DEFAULT_SERVICE
    namespace: str = names.DEFAULT_NAMESPACE
    workers: int = 1
    drain_seconds: float = 5.0
    reload_interval: float = 5.0
    # A WorkloadKinds file (None: the one shipped with the package).
    workload_kinds: Path | None = None
    # Where the last good policy files are kept for a restarted container (None: memory only).
    state_dir: Path | None = None
    limits: limits_module.Limits = field(default_factory=limits_module.Limits)
    # With a file: a handshake must present a client certificate that one of its CAs signed
    # and that carries one of `client_names` (subject CN or a DNS SAN). None: none is asked.
    client_ca_file: Path | None = None
    client_names: tuple[str, ...] = certificates.DEFAULT_CLIENT_NAMES
    cache_size: int = CACHE_SIZE
    # auto: uvloop where it is installed, else asyncio.
    event_loop: str = "auto"

    @property
    def cert_file(self) -> Path:
        return self.cert_dir / certificates.CERT_FILE

    @property
    def key_file(self) -> Path:
        return self.cert_dir / certificates.KEY_FILE
