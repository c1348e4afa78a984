"""Self-check of the Go benchmark peer: build it, serve it over TLS, and compare its answers
to the benchmark reviews with our core's.

    python bench/peer/check.py

For bench/core.py's pod(1) and pod(50), the review bodies of bench/server.py (and a few more
of its pods), the peer's JSON Patch must equal ours as parsed JSON (same ops, same order),
and uid, allowed, patchType and auditAnnotations too (`peer.differences`, which
bench/server.py checks every server's answers with). Prints OK per review (and whether the
answer is even byte for byte ours), or the difference; exits 1 on a difference.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench"), str(HERE)]

import core  # noqa: E402  bench/core.py
import peer  # noqa: E402
import server  # noqa: E402  bench/server.py

from webhook.policy import policies  # noqa: E402
from webhook.server import certificates, codec  # noqa: E402


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
                ours = codec.review(
                    body, policies=loaded, policy_name="default", endpoint="mutate"
                ).body
                for path in ("/mutate?timeout=10s", "/mutate/default?timeout=10s"):
                    theirs = server.post(port, body, ca_file, path=path)
                    diff = peer.differences(peer.parts(ours), peer.parts(theirs))
                    if diff:
                        failed = True
                        print(f"DIFFERENT {name} {path}:\n  " + "\n  ".join(diff))
                        continue
                    same = "byte for byte" if theirs == ours else "as parsed JSON"
                    ops = len(peer.parts(theirs).get("patch", []))
                    print(f"OK {name} {path.split('?')[0]}: {ops} ops, same {same}")
        finally:
            process.terminate()
            process.wait(10)
    print("FAILED" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
