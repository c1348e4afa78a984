"""The official Kubernetes client as the commands that talk to the API use it (`certs`, through
`cabundle`; `audit --cluster`, through `cluster`): a client from a kubeconfig or the pod's
service account, and what an error answer of the API server says, in one line.
"""

from __future__ import annotations

import json
import os
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException


class ConfigurationError(Exception):
    """No usable client configuration; str() is one line."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A `kubernetes.client.ApiClient`: from `kubeconfig` (its `context`, else its current
    one) if either is given, else the pod's service account, else the default kubeconfig
    (`$KUBECONFIG` or `~/.kube/config`).

    Use it in a `with` block (or close it): closing it closes its connections.
    """
    if kubeconfig and not os.path.exists(kubeconfig):
        raise ConfigurationError(f"{kubeconfig}: no such kubeconfig file")
    try:
        if kubeconfig or context:
            return config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, persist_config=False
            )
        configuration = client.Configuration()
        try:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except ConfigException:
            return config.new_client_from_config(  # type: ignore[no-untyped-call]
                persist_config=False
            )
        return client.ApiClient(configuration)
    # The loader raises whatever a malformed file provokes (YAML errors, KeyError, TypeError).
    except Exception as exc:
        where = kubeconfig or "the service account or the default kubeconfig"
        raise ConfigurationError(
            f"no usable Kubernetes configuration in {where}: {line(exc)}"
        ) from exc


def status(body: object) -> dict[str, Any]:
    """The `Status` object the API server sent with an error answer ({} if the body is none)."""
    if not body:
        return {}
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    try:
        document = json.loads(text)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def status_message(body: object) -> str:
    """The `message` of a `Status` the API server sent with an error, else the body's start."""
    message = status(body).get("message")
    if isinstance(message, str):
        return line(message)
    if not body:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    return line(text)[:200]


def line(value: object) -> str:
    """`value` as text on one line (the API's messages may hold newlines)."""
    return " ".join(str(value).split())
