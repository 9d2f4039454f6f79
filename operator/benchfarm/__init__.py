"""benchfarm: a Kubernetes operator that runs a shared lab of embedded boards for benchmarking."""

__version__ = "0.1.0"
