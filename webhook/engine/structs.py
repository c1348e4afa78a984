"""The structs of the view: the fields the rules read, as msgspec decodes them from the bytes.

This module stays uncompiled in a wheel (hatch_build.py): mypyc gives the classes it compiles
annotations msgspec cannot read. webhook/engine/view.py reads and explains them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Struct

from webhook.policy import names

# A name or key the messages may echo: longer than Kubernetes takes is a shape problem (the
# reader says so), and a message that names it stays short however many repeat it.
Name = Annotated[str, msgspec.Meta(max_length=names.MAX_NAME_LENGTH)]
# A path the rules clean and compare segment by segment: no longer than Linux takes.
Path = Annotated[str, msgspec.Meta(max_length=names.MAX_PATH_LENGTH)]

# Field names are the object's own (camelCase), so that a struct reads as the YAML does.
# `gc=False`: none of them can hold a cycle; `frozen`: a rule cannot change what another
# reads (mypy refuses the write, msgspec too at run time). Lists and maps of plain JSON values
# (a container's limits, the tolerations) stay as decoded.


class EnvVar(Struct, gc=False, frozen=True):
    name: Name | None = None
    value: str | None = None
    valueFrom: dict[str, Any] | None = None


class VolumeMount(Struct, gc=False, frozen=True):
    name: Name | None = None
    mountPath: Path | None = None
    readOnly: bool | None = None


class Capabilities(Struct, gc=False, frozen=True):
    add: list[Any] | None = None


class SecurityContext(Struct, gc=False, frozen=True):
    privileged: bool | None = None
    capabilities: Capabilities | None = None


class Resources(Struct, gc=False, frozen=True):
    limits: dict[Name, Any] | None = None
    requests: dict[Name, Any] | None = None
    claims: list[Any] | None = None


class Container(Struct, gc=False, frozen=True):
    name: Name | None = None
    resources: Resources | None = None
    env: list[EnvVar] | None = None
    envFrom: list[Any] | None = None
    securityContext: SecurityContext | None = None
    volumeMounts: list[VolumeMount] | None = None
    restartPolicy: str | None = None


class HostPath(Struct, gc=False, frozen=True):
    path: Path


class Volume(Struct, gc=False, frozen=True):
    name: Name | None = None
    hostPath: HostPath | None = None


class Requirement(Struct, gc=False, frozen=True, omit_defaults=True):
    key: Name | None = None
    operator: Name | None = None
    values: list[Name] | None = None


class Term(Struct, gc=False, frozen=True, omit_defaults=True):
    matchExpressions: list[Requirement] | None = None
    matchFields: list[Requirement] | None = None


class Required(Struct, gc=False, frozen=True):
    nodeSelectorTerms: list[Term] | None = None


class NodeAffinity(Struct, gc=False, frozen=True):
    requiredDuringSchedulingIgnoredDuringExecution: Required | None = None


class Affinity(Struct, gc=False, frozen=True):
    nodeAffinity: NodeAffinity | None = None


class PodSpec(Struct, gc=False, frozen=True):
    initContainers: list[Container] | None = None
    containers: list[Container] | None = None
    ephemeralContainers: list[Container] | None = None
    volumes: list[Volume] | None = None
    resourceClaims: list[Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    hostPID: bool | None = None
    hostIPC: bool | None = None
    hostNetwork: bool | None = None
    runtimeClassName: Name | None = None
    nodeSelector: dict[Name, Name] | None = None
    affinity: Affinity | None = None


class Meta(Struct, gc=False, frozen=True):
    # Values that are not strings are problems the reader finds (the typed decode refuses
    # them); the reader keeps them as their text, so that the rules still see the keys.
    annotations: dict[Name, str] | None = None
    labels: Any = None
    # What names the object in logs (any type: shown as text).
    name: Any = None
    generateName: Any = None
    namespace: Any = None


class Template(Struct, gc=False, frozen=True):
    """A pod spec and its metadata: a Pod's own, or a workload's pod template."""

    metadata: Meta | None = None
    spec: PodSpec | None = None


class PodObject(Struct, gc=False, frozen=True):
    apiVersion: Any = None
    kind: Any = None
    metadata: Meta | None = None
    spec: PodSpec | None = None


class WorkloadSpec(Struct, gc=False, frozen=True):
    template: Template | None = None


class Annotations(Struct, gc=False, frozen=True):
    """Metadata its pods never see (a workload's own, a CronJob's job template's): read for a
    profile annotation put there by mistake."""

    annotations: dict[str, Any] | None = None


class Workload(Struct, gc=False, frozen=True):
    apiVersion: Any = None
    kind: Any = None
    metadata: Annotations | None = None
    spec: WorkloadSpec | None = None


class JobSpec(Struct, gc=False, frozen=True):
    metadata: Annotations | None = None
    spec: WorkloadSpec | None = None


class CronJobSpec(Struct, gc=False, frozen=True):
    jobTemplate: JobSpec | None = None


class CronJob(Struct, gc=False, frozen=True):
    apiVersion: Any = None
    kind: Any = None
    metadata: Annotations | None = None
    spec: CronJobSpec | None = None


class Head(Struct, gc=False, frozen=True):
    """What is read of any object first: what it is."""

    apiVersion: Any = None
    kind: Any = None


class Names(Struct, gc=False, frozen=True):
    name: Any = None
    generateName: Any = None
    namespace: Any = None


class Named(Struct, gc=False, frozen=True):
    metadata: Names | None = None


_T = TypeVar("_T")


def _decoder(kind: type[_T]) -> Callable[[bytes], _T]:
    return msgspec.json.Decoder(kind).decode


decode_pod = _decoder(PodObject)
decode_workload = _decoder(Workload)
decode_cronjob = _decoder(CronJob)
decode_head = _decoder(Head)
decode_named = _decoder(Named)
decode_any = msgspec.json.Decoder().decode
