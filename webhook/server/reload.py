"""The things that watch files while the server runs: the serving certificate and the policies.

Both are polled (a stat or a read every few seconds costs nothing) rather than watched with
inotify: a mounted Secret or ConfigMap changes by the kubelet swapping a `..data` symlink,
which inotify on the visible files does not report reliably. Each keeps serving what it has
when what it finds is broken, says so once, and tries again on the next poll.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import ssl
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from cryptography import x509

from webhook.errors import CertificateError
from webhook.policy import documents, policies
from webhook.server.certificates import (
    ClientAuthority,
    PathLike,
    ServingPair,
    context_for,
    load_client_authority,
    load_into,
    load_pair,
)

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# What identifies a file's content without reading it. The resolved path matters for a
# mounted Secret: the kubelet writes a new `..2026_11_21_...` directory and swaps the
# `..data` symlink, so `tls.crt` resolves elsewhere while inode and mtime may look the same.
_Stamp = tuple[str, int, int, int, int] | None


def _stamp(path: Path) -> _Stamp:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (
        os.path.realpath(path),
        status.st_dev,
        status.st_ino,
        status.st_mtime_ns,
        status.st_size,
    )


class CertificateWatch:
    """Keeps an `ssl.SSLContext` serving what its certificate and key files hold.

    `check()` loads a changed pair into the same context: new handshakes use it, open
    connections keep theirs. A pair that cannot be served is refused, the current one stays,
    `on_error` hears about it once, and the next check tries again. The server calls
    `check()` on the event loop's thread: OpenSSL does not allow changing a context while
    another thread starts handshakes from it. The constructor loads the pair once, so that
    what is served and what `not_after` says agree from the start; it raises
    CertificateError if it cannot.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        cert_file: PathLike,
        key_file: PathLike,
        *,
        on_reload: Callable[[x509.Certificate], object] | None = None,
        on_error: Callable[[CertificateError], object] | None = None,
    ) -> None:
        self.context = context
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self._on_reload = on_reload
        self._on_error = on_error
        # Stamp before reading: a change during the read then shows on the next check.
        stamps = self._stamps()
        self._pair: ServingPair = load_pair(self.cert_file, self.key_file)
        load_into(context, self._pair, source=str(self.cert_file))
        self._stamps_served = stamps
        self._last_failure: tuple[object, str] | None = None

    @property
    def pair(self) -> ServingPair:
        """The pair new handshakes present."""
        return self._pair

    @property
    def certificate(self) -> x509.Certificate:
        """The certificate new handshakes present."""
        return self._pair.certificate

    @property
    def not_after(self) -> datetime:
        """When the certificate being served expires (UTC)."""
        return self._pair.not_after

    def seconds_until_expiry(self, now: datetime | None = None) -> float:
        """Seconds until the served certificate expires; negative once it has."""
        return (self.not_after - (now or datetime.now(UTC))).total_seconds()

    def check(self) -> bool:
        """Load the pair again if either file changed; True when a new pair is now served."""
        stamps = self._stamps()
        if stamps == self._stamps_served:
            return False
        try:
            pair = load_pair(self.cert_file, self.key_file)
            if (pair.cert_pem, pair.key_pem) == (self._pair.cert_pem, self._pair.key_pem):
                self._stamps_served = stamps  # touched or re-mounted, same content
                self._last_failure = None
                return False
            load_into(self.context, pair, source=str(self.cert_file))
        except CertificateError as exc:
            self._refused(stamps, exc)
            return False
        self._pair, self._stamps_served, self._last_failure = pair, stamps, None
        self._log_reload(pair.certificate)
        _call(self._on_reload, pair.certificate)
        return True

    def _stamps(self) -> tuple[_Stamp, _Stamp]:
        return _stamp(self.cert_file), _stamp(self.key_file)

    def _refused(self, stamps: tuple[_Stamp, _Stamp], exc: CertificateError) -> None:
        # The same broken files are retried on every check; say so once, not every time.
        failure = (stamps, str(exc))
        if failure == self._last_failure:
            logger.debug("still refusing the new certificate: %s", exc)
            return
        self._last_failure = failure
        logger.error(
            "refused the new certificate, still serving the one valid until %s: %s",
            f"{self.not_after:%Y-%m-%d %H:%M} UTC",
            exc,
        )
        _call(self._on_error, exc)

    def _log_reload(self, certificate: x509.Certificate) -> None:
        logger.info(
            "serving a new certificate from %s: serial %x, valid until %s",
            self.cert_file,
            certificate.serial_number,
            f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC",
        )
        if certificate.not_valid_after_utc <= datetime.now(UTC):
            logger.warning("the new certificate in %s has already expired", self.cert_file)


class ClientAuthorityWatch:
    """Keeps a context that requires client certificates current with the client CA file
    and with the serving pair of `served`.

    Python cannot take a CA out of a live context's trust store, so each change makes a new
    context; the listener takes the one in force for each new handshake (open connections
    keep theirs). A CA file that cannot be used is refused, the CAs in force stay, `on_error`
    hears about it once, and the next check tries again. The constructor loads the file
    once and raises CertificateError if it cannot.
    """

    def __init__(
        self,
        ca_file: PathLike,
        names: tuple[str, ...],
        served: CertificateWatch,
        *,
        on_reload: Callable[[ClientAuthority], object] | None = None,
        on_error: Callable[[CertificateError], object] | None = None,
    ) -> None:
        self.ca_file = Path(ca_file)
        self.names = names
        self._served = served
        self._on_reload = on_reload
        self._on_error = on_error
        stamp = _stamp(self.ca_file)
        self.authority = load_client_authority(self.ca_file, names)
        self._stamp_served = stamp
        self._pair = served.pair
        self.context = context_for(self._pair, client=self.authority, source=str(served.cert_file))
        self._last_failure: tuple[object, str] | None = None

    def refusal(self, ssl_object: ssl.SSLObject | None) -> str | None:
        """Why the client certificate of a finished handshake is not accepted, or None."""
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        return self.authority.refusal(der)

    def check(self) -> bool:
        """Take a changed CA file or serving pair into a new context; True when one is."""
        stamp = _stamp(self.ca_file)
        authority = self.authority
        pair = self._served.pair
        context = None
        if stamp != self._stamp_served:
            try:
                candidate = load_client_authority(self.ca_file, self.names)
                if candidate.pem == authority.pem:
                    self._stamp_served, self._last_failure = stamp, None
                else:
                    context = context_for(pair, client=candidate, source=str(self.ca_file))
                    authority = candidate
            except CertificateError as exc:
                self._refused(stamp, exc)
        if authority is self.authority and pair is self._pair:
            return False
        if context is None:  # a new serving pair, the CAs in force
            try:
                context = context_for(pair, client=authority, source=str(self._served.cert_file))
            except CertificateError as exc:  # pragma: no cover - the watch checked the pair
                self._refused(stamp, exc)
                return False
        if authority is not self.authority:
            self._stamp_served, self._last_failure = stamp, None
            logger.info(
                "accepting client certificates of new CAs from %s: %s",
                self.ca_file,
                "; ".join(c.subject.rfc4514_string() for c in authority.certificates),
            )
            _call(self._on_reload, authority)
        self.authority, self._pair, self.context = authority, pair, context
        return True

    def _refused(self, stamp: _Stamp, exc: CertificateError) -> None:
        failure = (stamp, str(exc))
        if failure == self._last_failure:
            logger.debug("still refusing the new client CA file: %s", exc)
            return
        self._last_failure = failure
        logger.error("refused the new client CA file, the CAs in force stay: %s", exc)
        _call(self._on_error, exc)


def _call(callback: Callable[[_T], object] | None, argument: _T) -> None:
    # A failing callback (a metric, a log hook) must not undo or stop a reload.
    if callback is None:
        return
    try:
        callback(argument)
    except Exception:
        logger.exception("certificate reload callback %r failed", callback)


# --------------------------------------------------------------------------- policies

# Where, under the state directory, the last good version of each policy file is kept.
_STATE_POLICIES = "policies"


class PolicyWatch:
    """Keeps the policy set in force current with a directory of policy files, file by file.

    A file that does not load never takes the server down nor the other files' policies out
    of force: its last good version serves on (kept in memory and, with `state_dir`, on disk,
    where a restarted container finds it: an emptyDir outlives the container), and without
    one its policies' namespaces are refused GPU pods with the file and the error
    (`PolicySet.broken`). `problems` says, per file name, what is wrong right now: the log,
    a metric and `/readyz` show it. `check()` is cheap when nothing changed (the files are
    a few kilobytes, read and compared).
    """

    def __init__(self, directory: Path, *, state_dir: Path | None = None) -> None:
        self.directory = directory
        self.state_dir = state_dir / _STATE_POLICIES if state_dir is not None else None
        # File name -> (bytes, what they load to): the last version of each file that loaded.
        self._last_good: dict[str, tuple[bytes, policies.FileLoad]] = {}
        self._seen: tuple[tuple[str, bytes], ...] | None = None
        self._reported: dict[str, str] = {}
        self.problems: dict[str, str] = {}
        # The files (or the directory) among `problems` that this process never loaded: no
        # last good version of its own serves in their place (`unready`).
        self.never_loaded: dict[str, str] = {}
        self._restore()
        files = self._read() or ()
        self._seen = files or None
        self.policies: policies.PolicySet = self._assemble(files)
        self._report()

    def check(self) -> bool:
        """Load the files again if they changed; True when the set in force changed."""
        version = _mounted_version(self.directory)
        files = self._read()
        if files is None or files == self._seen:
            return False
        loaded = self._assemble(files)
        if _mounted_version(self.directory) != version:
            # The kubelet swapped the mount while we read: the files may be half old, half
            # new. Look again next time, at one version.
            return False
        self._seen = files
        self.policies = loaded
        self._report()
        return True

    def detail(self) -> list[str]:
        """One line per file that does not load, for /readyz."""
        return [f"policy file {name}: {problem}" for name, problem in sorted(self.problems.items())]

    def unready(self) -> list[str]:
        """Why this replica must not be Ready, one line per file (empty: it may be): a policy
        file that does not load and never loaded here. A new replica of a rollout that brings
        a bad policy then stays out of the Service, the rollout stalls, and the old replicas,
        which had a good version, go on serving it."""
        return [
            f"policy file {name}: {problem}" for name, problem in sorted(self.never_loaded.items())
        ]

    # -- reading

    def _read(self) -> tuple[tuple[str, bytes], ...] | None:
        """Names and contents of the policy files; None when the directory cannot be read.

        Contents rather than modification times: a ConfigMap update swaps the `..data`
        symlink (names and times of the visible files may not change), and an edit can land
        within one timestamp tick.
        """
        try:
            found = []
            for path in policies.policy_files(self.directory):
                try:
                    found.append((path.name, path.read_bytes()))
                except OSError as exc:
                    found.append((path.name, _UNREADABLE + documents.why_unreadable(exc).encode()))
            return tuple(found)
        except OSError:
            return None

    def _assemble(self, files: tuple[tuple[str, bytes], ...]) -> policies.PolicySet:
        loads: list[policies.FileLoad] = []
        problems: dict[str, str] = {}
        never_loaded: dict[str, str] = {}
        for name, data in files:
            source = str(self.directory / name)
            load = _load(data, source)
            if not load.problems:
                loads.append(load)
                self._remember(name, data, load)
                continue
            problem = load.problems[0] + (
                f" (and {len(load.problems) - 1} more)" if len(load.problems) > 1 else ""
            )
            good = self._last_good.get(name)
            if good is not None:
                loads.append(good[1])
                problems[name] = f"{problem}; its last good version serves on"
            else:
                # Its namespaces are told which file and why; a name it declares, or else
                # the file's stem (policies are named after their files by convention).
                names = load.names or (Path(name).stem,)
                loads.append(dataclasses.replace(load, names=names))
                problems[name] = f"{problem}; its policies are not in force"
                never_loaded[name] = problems[name]
        if files:
            self._forget_all_but({name for name, _ in files})
        elif self._last_good:
            problems[str(self.directory)] = (
                "holds no policy file; the last good versions of the files it held serve on"
            )
            loads.extend(load for _, load in self._last_good.values())
        else:
            problems[str(self.directory)] = "holds no policy file; no policy is in force"
            never_loaded[str(self.directory)] = problems[str(self.directory)]
        loaded, clashes = policies.assemble(loads)
        for clash in clashes:  # two files defining one policy: the later one is refused
            name = Path(clash.split(":", 1)[0]).name
            problems.setdefault(name, clash)
            if name not in self._last_good:
                never_loaded.setdefault(name, clash)
        self.problems = problems
        self.never_loaded = never_loaded
        return loaded

    # -- the last good versions

    def _remember(self, name: str, data: bytes, load: policies.FileLoad) -> None:
        previous = self._last_good.get(name)
        self._last_good[name] = (data, load)
        if self.state_dir is None or (previous is not None and previous[0] == data):
            return
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            scratch = self.state_dir / f".{name}.new"
            scratch.write_bytes(data)
            os.replace(scratch, self.state_dir / name)
        except OSError as exc:
            logger.warning("cannot keep the last good %s in %s: %s", name, self.state_dir, exc)

    def _forget_all_but(self, names: set[str]) -> None:
        # A file removed from the directory was removed on purpose: its policies go.
        for name in [n for n in self._last_good if n not in names]:
            del self._last_good[name]
            if self.state_dir is not None:
                with contextlib.suppress(OSError):
                    (self.state_dir / name).unlink()

    def _restore(self) -> None:
        """The last good versions a previous container of this pod kept."""
        if self.state_dir is None or not self.state_dir.is_dir():
            return
        for path in policies.policy_files(self.state_dir):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            load = _load(data, f"{self.directory / path.name} (last good version, {path})")
            if not load.problems:
                self._last_good[path.name] = (data, load)

    def _report(self) -> None:
        """Log what changed in the problems: each once, and when it is fixed."""
        for name, problem in sorted(self.problems.items()):
            if self._reported.get(name) != problem:
                logger.error({"message": f"policy file {name} does not load", "problem": problem})
        for name in sorted(set(self._reported) - set(self.problems)):
            logger.info({"message": f"policy file {name} loads again"})
        self._reported = dict(self.problems)
        logger.info(
            {
                "message": f"policies in force from {self.directory}",
                "policies": self.policies.names,
                "not_in_force": sorted(self.policies.broken),
            }
        )


def _load(data: bytes, source: str) -> policies.FileLoad:
    if data.startswith(_UNREADABLE):
        why = data.removeprefix(_UNREADABLE).decode()
        return policies.FileLoad.unusable(source, f"{source}: {why}")
    return policies.FileLoad.of_bytes(data, source)


# What `_read` keeps of a file it cannot read, before the reason (a NUL byte: no YAML text
# holds one).
_UNREADABLE = b"\0unreadable: "


def _mounted_version(directory: Path) -> str | None:
    """Which version of a mounted ConfigMap the directory shows (where `..data` points)."""
    data = directory / "..data"
    return os.path.realpath(data) if data.is_symlink() else None
