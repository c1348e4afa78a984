"""Self-check of the Go benchmark peer: build it, serve it over TLS, and compare its answers
to the benchmark reviews with our core's.

    python bench/peer/check.py

For bench/core.py's pod(1) and pod(50) (and a few more of its pods, and bench/server.py's
review), the peer's JSON Patch must equal ours as parsed JSON (same ops, same order), and
uid, allowed, patchType and auditAnnotations too. Prints OK per review (and whether the
answer is even byte for byte ours), or the difference; exits 1 on a difference.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench"), str(HERE)]

import core  # noqa: E402  bench/core.py
import peer  # noqa: E402
import server  # noqa: E402  bench/server.py

from webhook import certificates, policies, reviews  # noqa: E402

HOST = f"{server.SERVICE}.{server.NAMESPACE}.svc"


def post(port: int, path: str, body: bytes, ca_file: Path) -> bytes:
    """One review over TLS, checked as the API server checks (CA and name); the body."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), 5) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        tls.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    head, _, answer = data.partition(b"\r\n\r\n")
    if head.split(b" ", 2)[1] != b"200":
        raise SystemExit(f"{path} answered {head.decode()}\n{answer[:300]!r}")
    return answer


def parts(answer: bytes) -> dict[str, Any]:
    response: dict[str, Any] = json.loads(answer)["response"]
    if "patch" in response:
        response["patch"] = json.loads(base64.b64decode(response["patch"]))
    return response


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
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


def wait_listening(process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"peer exited with {process.returncode}:\n{log.read_text()}")
        if "listening" in log.read_text():
            return
        time.sleep(0.05)
    raise SystemExit(f"peer not listening after 30 s:\n{log.read_text()}")


def main() -> int:
    loaded = policies.load_directory(REPO / "policies")
    cases = {
        "core pod(1)": core.review_body(core.pod(1)),
        "core pod(50)": core.review_body(core.pod(50)),
        "core pod(1, gpu=False)": core.review_body(core.pod(1, gpu=False)),
        "core pod(5, init=2)": core.review_body(core.pod(5, init=2)),
        "server.py POD": server.review_body(server.POD),
    }
    failed = False
    with tempfile.TemporaryDirectory(prefix="gpu-share-peer-") as tmp:
        directory = Path(tmp)
        started = time.monotonic()
        binary = peer.build(directory)
        print(f"built {binary.name} in {time.monotonic() - started:.1f} s")
        cert_dir = directory / "certs"
        certificates.write_bundle(
            cert_dir,
            certificates.make_bundle(service=server.SERVICE, namespace=server.NAMESPACE),
        )
        port = server.free_port()
        command = peer.command(
            binary, cert_dir / certificates.CERT_FILE, cert_dir / certificates.KEY_FILE, port
        )
        log = directory / "peer.log"
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_listening(process, log)
            ca_file = cert_dir / certificates.CA_FILE
            for name, body in cases.items():
                ours = reviews.review(
                    body, policies=loaded, policy_name="default", endpoint="mutate"
                ).body
                for path in ("/mutate?timeout=10s", "/mutate/default?timeout=10s"):
                    theirs = post(port, path, body, ca_file)
                    diff = differences(parts(ours), parts(theirs))
                    if diff:
                        failed = True
                        print(f"DIFFERENT {name} {path}:\n  " + "\n  ".join(diff))
                        continue
                    same = "byte for byte" if theirs == ours else "as parsed JSON"
                    ops = len(parts(theirs).get("patch", []))
                    print(f"OK {name} {path.split('?')[0]}: {ops} ops, same {same}")
        finally:
            process.terminate()
            process.wait(10)
    print("FAILED" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
