"""Workload kinds from configuration: the resources of other projects whose pod templates the
validating webhook reviews, as the built-in kinds' are (JobSet, LeaderWorkerSet, Ray,
Kubeflow by default).

A file holds one document::

    apiVersion: gpu-share.io/v1alpha1
    kind: WorkloadKinds
    spec:
      kinds:
        - group: jobset.x-k8s.io
          versions: [v1alpha2]
          kind: JobSet
          resource: jobsets
          templates:
            - spec.replicatedJobs[].template.spec.template

A template path is dotted keys with at most one `[]` (every item of a list) or `{}` (every
value of an object) after a key. `load` checks the file as `policies` checks a policy: each
problem as `file: field: reason`. The shipped default is `workload-kinds.yaml` beside this
module; `--workload-kinds FILE` replaces it (an empty `kinds: []` turns the extra kinds off).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from webhook.errors import InputError, PolicyError
from webhook.policy import documents, names

# A path to pod templates in an object: keys, and at most one "[]" (every item of a list)
# or "{}" (every value of an object), e.g. ("spec", "replicatedJobs", "[]", "template",
# "spec", "template").
TemplatePath = tuple[str, ...]
EACH_ITEM = "[]"
EACH_VALUE = "{}"


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind whose objects carry pod templates, and where they are."""

    group: str
    kind: str
    resource: str  # the plural resource name, as webhook rules name it
    versions: tuple[str, ...]
    paths: tuple[TemplatePath, ...]
    # Kinds of other projects are named in messages with the template's path.
    builtin: bool = True


BUILTIN_KINDS: tuple[Kind, ...] = (
    Kind("apps", "Deployment", "deployments", ("v1",), (("spec", "template"),)),
    Kind("apps", "ReplicaSet", "replicasets", ("v1",), (("spec", "template"),)),
    Kind("apps", "StatefulSet", "statefulsets", ("v1",), (("spec", "template"),)),
    Kind("apps", "DaemonSet", "daemonsets", ("v1",), (("spec", "template"),)),
    Kind("batch", "Job", "jobs", ("v1",), (("spec", "template"),)),
    Kind("batch", "CronJob", "cronjobs", ("v1",), (("spec", "jobTemplate", "spec", "template"),)),
    Kind("", "ReplicationController", "replicationcontrollers", ("v1",), (("spec", "template"),)),
)

Kinds = Mapping[tuple[str, str], Kind]


def kinds_by_name(kinds: Sequence[Kind]) -> dict[tuple[str, str], Kind]:
    return {(k.group, k.kind): k for k in kinds}


BUILTIN: Kinds = kinds_by_name(BUILTIN_KINDS)

KIND = "WorkloadKinds"
DEFAULT_FILE = Path(__file__).resolve().parent / "workload-kinds.yaml"

_DNS_LABEL = names.DNS1123_LABEL
_GROUP = rf"^{_DNS_LABEL}(\.{_DNS_LABEL})+$"
_KEY = r"[A-Za-z][A-Za-z0-9]*"
_PATH = re.compile(rf"^{_KEY}(\[\]|\{{\}})?(\.{_KEY}(\[\]|\{{\}})?)*$")

Group = Annotated[str, StringConstraints(pattern=_GROUP, max_length=253)]
Version = Annotated[str, StringConstraints(pattern=r"^v[0-9]+((alpha|beta)[0-9]+)?$")]
KindName = Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Za-z0-9]*$", max_length=63)]
Resource = Annotated[str, StringConstraints(pattern=rf"^{_DNS_LABEL}$", max_length=63)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KindSpec(_Model):
    group: Group
    versions: list[Version] = Field(min_length=1)
    kind: KindName
    resource: Resource
    templates: list[str] = Field(min_length=1)

    @field_validator("templates")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for path in value:
            if not _PATH.fullmatch(path):
                raise ValueError(
                    f"{path!r} is not a template path (dotted keys, at most one [] or {{}},"
                    " e.g. spec.replicatedJobs[].template.spec.template)"
                )
            if path.count("[]") + path.count("{}") > 1:
                raise ValueError(f"{path!r}: at most one [] or {{}} in a path")
        return value


class KindsSpec(_Model):
    kinds: list[KindSpec] = Field(default_factory=list)


class KindsDocument(_Model):
    api_version: Literal["gpu-share.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["WorkloadKinds"]
    metadata: dict[str, object] | None = None
    spec: KindsSpec


def path_steps(path: str) -> TemplatePath:
    """`spec.replicatedJobs[].template` -> ("spec", "replicatedJobs", "[]", "template")."""
    steps: list[str] = []
    for part in path.split("."):
        for marker in (EACH_ITEM, EACH_VALUE):
            if part.endswith(marker):
                steps += [part[: -len(marker)], marker]
                break
        else:
            steps.append(part)
    return tuple(steps)


def parse(text: str, source: str) -> tuple[Kind, ...]:
    """The kinds a file's text lists; PolicyError with every problem (file: field: reason)."""
    try:
        docs = [d for d in documents.load(text, source) if d is not None]
    except InputError as exc:
        raise PolicyError([str(exc)]) from None
    if not docs:
        raise PolicyError([documents.holds_none(source, f"{KIND} document")])
    if len(docs) > 1:
        raise PolicyError([f"{source}: holds {len(docs)} documents; a {KIND} file holds one"])
    (doc,) = docs
    if not isinstance(doc, dict):
        raise PolicyError([f"{source}: a {KIND} document is a mapping, not {type(doc).__name__}"])
    try:
        model = KindsDocument.model_validate(doc)
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            where = ".".join(str(p) for p in err["loc"]) or "(document)"
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field (a typo? unknown fields are refused, not ignored)"
            problems.append(f"{source}: {where}: {msg}")
        raise PolicyError(problems) from None
    problems = []
    seen: set[tuple[str, str]] = set(BUILTIN)
    out: list[Kind] = []
    for i, k in enumerate(model.spec.kinds):
        if (k.group, k.kind) in seen:
            problems.append(f"{source}: spec.kinds.{i}: {k.group}/{k.kind} is listed already"
                            " (or is a built-in kind)")
            continue
        seen.add((k.group, k.kind))
        out.append(Kind(k.group, k.kind, k.resource, tuple(k.versions),
                             tuple(path_steps(p) for p in k.templates), builtin=False))
    if problems:
        raise PolicyError(problems)
    return tuple(out)


def load(path: Path | None = None) -> tuple[Kind, ...]:
    """The extra kinds of `path` (the shipped default when None); PolicyError if unusable."""
    path = path or DEFAULT_FILE
    try:
        text = documents.read_file(path)
    except InputError as exc:
        raise PolicyError([str(exc)]) from None
    return parse(text, str(path))


def all_kinds(path: Path | None = None) -> tuple[Kind, ...]:
    """The built-in kinds and those of `path`."""
    return BUILTIN_KINDS + load(path)
