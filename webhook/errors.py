"""The exceptions of gpu-share-webhook.

    WebhookError                 base of everything raised on purpose
    ├── PolicyError              a policy file or directory cannot be used (file, field, reason)
    ├── InputError               a file of documents cannot be read (`policy.documents`)
    ├── BadReview                a request body is not a usable AdmissionReview (HTTP 400)
    └── CertificateError         certificates cannot be made, read or installed

A rule that refuses an object is not an exception: it is a `decisions.Violation`, answered
with HTTP 200 and `allowed: false`.
"""

from __future__ import annotations


class WebhookError(Exception):
    """Base of the errors gpu-share-webhook raises on purpose."""


class PolicyError(WebhookError):
    """A policy file or directory cannot be used; carries every problem found."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems) if self.problems else "invalid policy")


class InputError(WebhookError):
    """A file of documents (a command's input, a policy file) cannot be read."""


class BadReview(WebhookError):
    """A request body is not a usable AdmissionReview v1."""


class CertificateError(WebhookError):
    """Certificates cannot be made, read or installed."""
