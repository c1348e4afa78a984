# syntax=docker/dockerfile:1
#
# gpu-share-webhook: `docker build -t gpu-share-webhook:0.1.0 .` from the repository root.
# Two stages: the builder makes the wheel and installs it with its dependencies into a
# virtualenv; the final image gets that virtualenv and nothing else of the builder. Every
# dependency ships binary wheels for linux/amd64 and linux/arm64, so neither stage has (or
# needs) a compiler.

FROM python:3.12-slim-bookworm AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook/ webhook/
# The wheel embeds the shipped policies (pyproject: force-include).
COPY policies/ policies/

# The virtualenv has no pip of its own: the builder's pip installs into it (--python).
# Versions come from the ranges in pyproject.toml.
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist . \
    && python -m venv --without-pip /opt/gpu-share-webhook \
    && python -m pip --python /opt/gpu-share-webhook/bin/python install --no-cache-dir \
        --no-compile /dist/gpu_share_webhook-*.whl


FROM python:3.12-slim-bookworm

LABEL org.opencontainers.image.title="gpu-share-webhook" \
      org.opencontainers.image.description="Kubernetes admission webhook for shared NVIDIA GPUs" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PATH=/opt/gpu-share-webhook/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

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
