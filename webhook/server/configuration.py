"""What `serve` can be told: `Settings`, a flag and an environment variable for each field
but `limits` and `reload_interval`, which are fixed (tests shrink them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from webhook.policy import names
from webhook.server import certificates

# Aliased: `Settings.limits` is a field of that name.
from webhook.server import limits as limits_module


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a server runs with."""

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
    drain_seconds: float = 5.0
    # How often the policy and certificate files are looked at (no flag).
    reload_interval: float = 5.0
    # A WorkloadKinds file (None: the one shipped with the package).
    workload_kinds: Path | None = None
    # Where the last good policy files are kept for a restarted container (None: memory only).
    state_dir: Path | None = None
    # The fixed bounds (no flags; `limits.Limits`).
    limits: limits_module.Limits = field(default_factory=limits_module.Limits)
    # With a file: a handshake must present a client certificate that one of its CAs signed
    # and that carries one of `client_names` (subject CN or a DNS SAN). None: none is asked.
    client_ca_file: Path | None = None
    client_names: tuple[str, ...] = certificates.DEFAULT_CLIENT_NAMES

    @property
    def cert_file(self) -> Path:
        return self.cert_dir / certificates.CERT_FILE

    @property
    def key_file(self) -> Path:
        return self.cert_dir / certificates.KEY_FILE
