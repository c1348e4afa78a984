"""A command whose reader goes away (`gpu-share-webhook ... | head -c1`) stops quietly, with
141 (128 + SIGPIPE) as a shell reports a C tool that SIGPIPE ended: no traceback.

Real processes and real pipes. Two ways a reader goes: before the command writes anything
(the write of the last, buffered output fails: every command, however short its output), and
after reading one byte of an output longer than the pipe holds (the command is blocked in a
write when the pipe closes: its next write fails). Both are certain, not races.

The pipes hold one page (`PIPE_BYTES`, set on each), not Linux's default 64 KiB, so that an
output of a few dozen pods is already many times longer than a pipe holds.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import nodes

REPO = Path(__file__).resolve().parents[2]
BROKEN_PIPE = 141
# What each pipe holds: the least Linux gives a pipe.
PIPE_BYTES = 4096

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {
        "containers": [
            {
                "name": "cuda",
                "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
            }
        ]
    },
}
NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "team-a", "labels": {"gpu-share.io/enabled": "true"}},
}


def inputs(tmp_path: Path, copies: int) -> dict[str, list[str]]:
    """Each command with its arguments; `copies` pods where a command prints each."""
    node_dump = nodes.write(tmp_path, [nodes.node("t4-1", nodes.T4_MPS)])
    pods = [
        {**POD, "metadata": {"name": f"train-{i}", "namespace": "team-a"}} for i in range(copies)
    ]
    objects = tmp_path / "pods.json"
    objects.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [NAMESPACE, *pods]}))
    return {
        "policy check": ["policy", "check", str(REPO / "policies"), "--nodes", str(node_dump)],
        "explain": ["explain", "namespace", "t", "-l", "gpu-share.io/enabled=true", "-o", "json"],
        "render": ["render", "--policies", str(REPO / "policies")],
        "mutate": ["mutate", "-f", str(objects), "-o", "yaml"],
        "audit": ["audit", "-f", str(dump), "--policies", str(REPO / "policies")],
    }


def run_into_pipe(
    args: list[str], cwd: Path, *, read: int | None, unbuffered: bool | None = None
) -> tuple[int, str]:
    """Runs the command with its stdout a pipe whose reader closes it: at once (`read` None)
    or after reading `read` bytes; with PYTHONUNBUFFERED set or not (None: as it is here).
    Returns the exit code and stderr."""
    reader, writer = os.pipe()
    fcntl.fcntl(writer, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    assert fcntl.fcntl(writer, fcntl.F_GETPIPE_SZ) == PIPE_BYTES
    if read is None:
        os.close(reader)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SHARE_WEBHOOK_")}
    if unbuffered is not None:
        env.pop("PYTHONUNBUFFERED", None)
        if unbuffered:
            env["PYTHONUNBUFFERED"] = "1"
    with subprocess.Popen(
        [sys.executable, "-m", "webhook", *args],
        stdout=writer,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    ) as process:
        os.close(writer)
        if read is not None:
            assert os.read(reader, read)
            os.close(reader)
        _, err = process.communicate(timeout=60)
    return process.returncode, err.decode()


@pytest.mark.parametrize("command", ["policy check", "explain", "render", "mutate", "audit"])
def test_a_command_whose_reader_is_gone_before_it_writes_stops_quietly(
    command: str, tmp_path: Path
) -> None:
    code, err = run_into_pipe(inputs(tmp_path, 1)[command], tmp_path, read=None)
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err
    assert code == BROKEN_PIPE, err


def test_a_command_whose_reader_leaves_after_one_byte_stops_quietly(tmp_path: Path) -> None:
    # More than a pipe holds (PIPE_BYTES; 40 pods make 55 KB of patches, 65 KB of YAML), in
    # several writes (one patch a line), or in one (the YAML), which the kernel cuts short
    # when the reader leaves: written through a raw file, as under PYTHONUNBUFFERED, the rest
    # would be dropped without an error.
    pods = inputs(tmp_path, 40)["mutate"]
    for args in ([*pods[:-1], "patch"], pods):
        for unbuffered in (False, True):
            code, err = run_into_pipe(args, tmp_path, read=1, unbuffered=unbuffered)
            assert "Traceback" not in err
            assert "BrokenPipeError" not in err
            assert code == BROKEN_PIPE, (args[-1], unbuffered, err)
