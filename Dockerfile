# syntax=docker/dockerfile:1
#
# gpu-share-webhook: `docker build -t gpu-share-webhook:0.1.0 .` from the repository root.
# Two stages: the builder makes the wheel and installs it with its dependencies into a
# virtualenv; the final image gets that virtualenv and nothing else of the builder.
#
# The wheel build compiles the request path with mypyc (hatch_build.py), which needs a C
# compiler, the C library's headers and Python's headers. The builder is therefore the full
# python image, which has all three (gcc and libc6-dev come with it) and so needs no
# apt-get; the final image is the slim one, with no compiler. Both are Python 3.12 on Debian
# bookworm: one ABI, one C library, so the compiled modules run in the final image.
# Dependencies come as binary wheels only (each ships them for linux/amd64 and linux/arm64),
# so none is built against a library that only the builder has.
#
# Reproducible: the base images are pinned to an exact Python release (add `@sha256:<digest>`
# of `docker buildx imagetools inspect <image>` to pin their contents too), and every runtime
# dependency, transitive ones included, comes from requirements/image.txt: one version each,
# with the sha256 of its wheels for both architectures (pip refuses any other file). Make that
# file again with `python3 hack/pin-image-requirements.py` after changing the ranges in
# pyproject.toml.

FROM python:3.12.12-bookworm AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# Set (to 1) for a pure-Python wheel on purpose: hatch_build.py then skips the compile.
ARG GPU_SHARE_WEBHOOK_PURE_PYTHON=

WORKDIR /src
# hatch_build.py is the wheel's build hook (pyproject.toml enables it): no wheel without it.
COPY pyproject.toml README.md hatch_build.py ./
COPY requirements/image.txt requirements/image.txt
COPY webhook/ webhook/
# The wheel embeds the shipped policies (pyproject: force-include).
COPY policies/ policies/

# A compile that fails does not fail the wheel build (hatch_build.py falls back to pure
# Python with a warning), so a pure-Python wheel is refused here, unless it was asked for:
# an image that is only slower would otherwise ship unnoticed.
# The virtualenv has no pip of its own: the builder's pip installs into it (--python).
# The dependencies are exactly those of requirements/image.txt, checked by their hashes; the
# wheel built here (no published hash) goes in without dependencies of its own, and pip check
# fails the build when the pinned set does not satisfy the ranges in pyproject.toml.
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist . \
    && if [ -z "$GPU_SHARE_WEBHOOK_PURE_PYTHON" ] \
        && [ -n "$(find /dist -name '*-none-any.whl')" ]; then \
        echo "mypyc did not compile the request path (its warning is above)" >&2; exit 1; \
    fi \
    && python -m venv --without-pip /opt/gpu-share-webhook \
    && python -m pip --python /opt/gpu-share-webhook/bin/python install --no-cache-dir \
        --no-compile --only-binary=:all: --require-hashes -r requirements/image.txt \
    && python -m pip --python /opt/gpu-share-webhook/bin/python install --no-cache-dir \
        --no-compile --no-deps /dist/gpu_share_webhook-*.whl \
    && python -m pip --python /opt/gpu-share-webhook/bin/python check


FROM python:3.12.12-slim-bookworm

LABEL org.opencontainers.image.title="gpu-share-webhook" \
      org.opencontainers.image.description="Kubernetes admission webhook for shared NVIDIA GPUs" \
      org.opencontainers.image.licenses="Apache-2.0"

# glibc's allocator: two arenas, and blocks of 256 KiB and more mapped on their own, so that
# the memory a flood of large reviews took goes back (docs/operations.md).
ENV PATH=/opt/gpu-share-webhook/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=262144

COPY --from=builder /opt/gpu-share-webhook /opt/gpu-share-webhook

# A working directory the user owns: `docker run` without a mounted cert dir makes its local
# CA and serving certificate in ./certs. In Kubernetes the root filesystem is read-only and
# certificates and policies are mounted (deploy/base/deployment.yaml).
RUN install -d -o 65532 -g 65532 /var/lib/gpu-share-webhook
WORKDIR /var/lib/gpu-share-webhook

# Numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
USER 65532:65532

# Admission (HTTPS) and /healthz, /readyz, /metrics (plain HTTP).
EXPOSE 8443 8080

# No HEALTHCHECK: Kubernetes ignores it (the Deployment's liveness and readiness probes call
# /healthz and /readyz), and the image also runs the one-shot `certs` command (bootstrap Job),
# for which a server health check would be wrong.
HEALTHCHECK NONE

ENTRYPOINT ["gpu-share-webhook"]
CMD ["serve"]
