"""gpu-share-webhook: a Kubernetes admission webhook for shared NVIDIA GPUs."""

__version__ = "0.1.0"
