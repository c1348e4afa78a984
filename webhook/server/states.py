"""What the admission and the probe applications of one server share: `State`.

`State.load(settings, ...)` reads what a server starts from (the policy files, the workload
kinds, the certificate pair) and builds the state from it; `State(...)` itself reads nothing,
so a state can be built from parts.
"""

from __future__ import annotations

import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from aiohttp import web

from webhook.policy import kinds, policies
from webhook.server import (
    certificates,
    codec,
    configuration,
    inflight,
    limits,
    logs,
    memory,
    metrics,
    reload,
)


class ReviewFunction(Protocol):
    """What answers one review: `codec.review`, or a stand-in given to `create_app`."""

    def __call__(
        self,
        body: bytes,
        *,
        policies: policies.PolicySet,
        policy_name: str,
        endpoint: codec.Endpoint,
        kinds: kinds.Kinds,
    ) -> codec.Outcome: ...


class State:
    """What both applications share: the policies and certificate in force, metrics, flags,
    the review bytes in flight and the heap's trimmer.

    `policies` is replaced whole by a reload (one reference assignment); a handler reads it
    once, so a review in flight finishes with the set it started with.
    """

    def __init__(
        self,
        settings: configuration.Settings,
        *,
        policy_watch: reload.PolicyWatch,
        certificates: reload.CertificateWatch,
        kinds: kinds.Kinds,
        budget: inflight.Budget,
        review: ReviewFunction = codec.review,
        metrics: metrics.Metrics,
        review_lines: logs.ReviewWriter,
        clients: reload.ClientAuthorityWatch | None = None,
    ) -> None:
        self.settings = settings
        # Who may connect (None: anyone who completes a handshake).
        self.clients = clients
        self.metrics = metrics
        self.review = review
        self.review_lines = review_lines
        self.policy_watch = policy_watch
        self.certificates = certificates
        self.kinds = kinds
        self.budget = budget
        self.trimmer = memory.Trimmer()
        self.ready = False
        self.draining = False
        # Set while the admission application runs (`app._running`).
        self.executor: ThreadPoolExecutor | None = None
        # Set by `serving` when it listens through `limits.listen`.
        self.connections: limits.Connections | None = None
        self.update_gauges()

    @classmethod
    def load(
        cls,
        settings: configuration.Settings,
        *,
        budget: inflight.Budget,
        review: ReviewFunction,
        metrics: metrics.Metrics,
        review_lines: logs.ReviewWriter,
    ) -> State:
        """A state from what `settings` names: the policy files (a file that does not load
        does not stop it, see `reload.PolicyWatch`), the workload kinds and the certificate
        pair and the client CA file (CertificateError when either cannot be used)."""
        policy_watch = reload.PolicyWatch(settings.policies_dir, state_dir=settings.state_dir)
        workload_kinds = kinds.kinds_by_name(kinds.all_kinds(settings.workload_kinds))
        context = certificates.server_ssl_context(settings.cert_file, settings.key_file)
        served = reload.CertificateWatch(
            context,
            settings.cert_file,
            settings.key_file,
            on_reload=lambda _certificate: metrics.certificate_reloads.inc(),
            on_error=lambda _error: metrics.certificate_reload_errors.inc(),
        )
        clients = None
        if settings.client_ca_file is not None:
            clients = reload.ClientAuthorityWatch(
                settings.client_ca_file,
                settings.client_names,
                served,
                on_reload=lambda _authority: metrics.certificate_reloads.inc(),
                on_error=lambda _error: metrics.certificate_reload_errors.inc(),
            )
        return cls(
            settings,
            policy_watch=policy_watch,
            certificates=served,
            clients=clients,
            kinds=workload_kinds,
            budget=budget,
            review=review,
            metrics=metrics,
            review_lines=review_lines,
        )

    @property
    def policies(self) -> policies.PolicySet:
        return self.policy_watch.policies

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """What the next handshake on the admission port uses (the watches keep it current:
        with a client CA, a new context for each change)."""
        clients = self.clients
        return clients.context if clients is not None else self.certificates.context

    def client_refusal(self, ssl_object: ssl.SSLObject | None) -> str | None:
        """Why a finished handshake's client certificate is not accepted, or None."""
        clients = self.clients
        return None if clients is None else clients.refusal(ssl_object)

    def check_policies(self) -> bool:
        """Load the policy files again if they changed (see `reload.PolicyWatch`)."""
        before = dict(self.policy_watch.problems)
        changed = self.policy_watch.check()
        problems = self.policy_watch.problems
        if changed and set(problems) - set(before):
            self.metrics.policy_reload_errors.inc()
        elif changed:
            self.metrics.policy_reloads.inc()
        self.update_gauges()
        return changed

    def check_certificate(self) -> bool:
        """Serve the certificate files and the client CA file anew if they changed (see
        `reload.CertificateWatch` and `reload.ClientAuthorityWatch`)."""
        changed = self.certificates.check()
        if self.clients is not None:
            changed = self.clients.check() or changed
        self.update_gauges()
        return changed

    def update_gauges(self) -> None:
        metrics = self.metrics
        metrics.certificate_expiry.set(self.certificates.seconds_until_expiry())
        metrics.policy_files_not_loaded.set(len(self.policy_watch.problems))
        if self.connections is not None:
            metrics.connections.set(len(self.connections))


STATE = web.AppKey("state", State)
