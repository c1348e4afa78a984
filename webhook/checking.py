"""What `gpu-share-webhook policy check` finds in a directory of policies, and in a node dump.

Every problem of every file in one round: a file that does not load does not stop the others,
a document whose fields are wrong is still judged by the validators pydantic did not run
(`policies.unreached_problems`), and two files that declare one name clash whether or not they
load. Then, of the policies that load, what can never happen although the server loads it
(warnings), and, with a node dump, the taints that keep a class's pods off its nodes.

Two levels, as the command prints them: an *error* is something the server refuses (the file
does not load) or a class that can place no pod on the nodes given: exit 1. A *warning* is
something the server loads and an admin should know of: exit 0. A file that cannot be read is
bad input (exit 2), after everything else has been said.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook import discovering, policies
from webhook.core import placing
from webhook.errors import PolicyError


@dataclass(frozen=True, slots=True)
class DirectoryReport:
    """A directory of policy files, checked."""

    # The policies the server would put in force (`policies.assemble`).
    loaded: policies.PolicySet
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    # Files that cannot be read: bad input.
    unreadable: tuple[str, ...]

    @property
    def complete(self) -> bool:
        """Whether every policy of the directory loaded (so the set covers all of them)."""
        return not self.errors and not self.unreadable


def check_directory(directory: Path) -> DirectoryReport:
    """Every problem of every policy file of `directory` (a directory), and the warnings of
    the policies that load. PolicyError when `directory` is no directory."""
    if not directory.is_dir():
        raise PolicyError([f"{directory}: not a directory of policy files"])
    files = policies.policy_files(directory)
    if not files:
        return DirectoryReport(
            policies.PolicySet({}), (f"{directory}: holds no *.yaml policy file",), (), ()
        )
    errors: list[str] = []
    unreadable: list[str] = []
    loads: list[policies.FileLoad] = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            unreadable.append(f"{file}: cannot be read: {exc.strerror or exc}")
            continue
        except UnicodeDecodeError as exc:
            errors.append(f"{file}: not UTF-8 text: {exc.reason}")
            continue
        load = policies.FileLoad.of(text, str(file))
        loads.append(load)
        errors.extend(load.problems)
    # What the server would put in force, as it would (a file that clashes is out whole).
    loaded, problems = policies.assemble(loads)
    # A name declared twice is an error wherever it is, even in a file that does not load
    # (`assemble` says so only of the files that do): else it shows only once that file is
    # fixed.
    first: dict[str, policies.FileLoad] = {}
    for load in loads:
        for name in [p.name for p in load.policies] if load.policies else load.names:
            earlier = first.setdefault(name, load)
            if earlier is load:
                continue
            if earlier.problems and not load.problems:
                # In force now (the server serves it while the other does not load).
                errors.append(
                    f"{load.source}: metadata.name: policy {name!r} is also declared in"
                    f" {earlier.source}, which does not load; once it does, this file is out"
                    " of force"
                )
            else:
                errors.append(
                    f"{load.source}: metadata.name: policy {name!r} is already defined in"
                    f" {earlier.source}"
                )
    errors.extend(p for p in problems if p not in errors)
    warnings = [w for name in loaded.names for w in policy_warnings(loaded.policies[name])]
    return DirectoryReport(loaded, tuple(errors), tuple(warnings), tuple(unreadable))


# --------------------------------------------------------------------------- loads, never matches


def policy_warnings(policy: policies.Policy) -> list[str]:
    """What a policy the server loads says that can never happen, each as
    `<file>: <field path>: <reason and what to do>`."""
    out: list[str] = []
    where = policy.source
    mps = [c for c in policy.classes if c.mps]
    if policy.profiles and not mps:
        out.append(
            f"{where}: spec.profiles: no node class is mps, so no profile limits anything"
            " (time-slicing nodes ignore CUDA_MPS_*); remove them, or add the MPS class they"
            " are meant for"
        )
    if policy.profiles:
        default = policy.profiles.get(policy.default_profile or "")
        for c in mps:
            ceiling = _ceiling(c)
            if not any(_fits(p, c) for p in policy.profiles.values()):
                out.append(
                    f"{where}: spec.nodeClasses[{c.index}]: class {c.name} takes no pod that"
                    f" uses a profile: every profile is above its MPS ceiling ({ceiling});"
                    " add a profile within it, or remove the class"
                )
            elif default is not None and not _fits(default, c):
                out.append(
                    f"{where}: spec.defaultProfile: {default.name} is above the MPS ceiling of"
                    f" class {c.name} ({ceiling}): pods that name no profile never land there"
                )
    seen: dict[tuple[tuple[str, str], ...], policies.NodeClass] = {}
    for c in policy.classes:
        other = seen.setdefault(c.selector, c)
        if other is not c:
            out.append(
                f"{where}: spec.nodeClasses[{c.index}]: class {c.name} selects the nodes class"
                f" {other.name} selects (the same {_labels(c)}); the webhook cannot tell them"
                " apart: merge them into one"
            )
    return out


def _ceiling(c: policies.NodeClass) -> str:
    return f"{c.thread_ceiling}% / {c.memory_ceiling_mib or 0} MiB"


def _fits(profile: policies.Profile, c: policies.NodeClass) -> bool:
    threads, memory = profile.active_thread_percentage, profile.pinned_memory_mib
    if threads is not None and c.thread_ceiling is not None and threads > c.thread_ceiling:
        return False
    return memory is None or c.memory_ceiling_mib is None or memory <= c.memory_ceiling_mib


def _labels(c: policies.NodeClass) -> str:
    return ", ".join(f"{k}={v}" for k, v in c.selector)


# --------------------------------------------------------------------------- taints


def class_tolerations(policy: policies.Policy, cls: policies.NodeClass) -> list[dict[str, Any]]:
    """The tolerations a pod of `cls` gets from the webhook (`placing.wanted_tolerations`)."""
    return [dict(t) for t in placing.wanted_tolerations(policy, cls.advertised)]


# One taint matcher for `policy check` and `discover` (it reads the nodes' taints).
tolerates = discovering.tolerates
untolerated = discovering.untolerated
Untolerated = discovering.Untolerated
