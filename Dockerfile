# benchfarm operator image: the operator, the labgrid client and the MinIO SDK; from Debian, the
# clients sessions run: ssh and rsync (labgrid stages software on exporters and LG_PROXY forwards
# through SSH) and sigrok-cli (the `sigrok` rail backend).
# Base images are pinned by version; Python packages by constraints.txt (pip freeze of a tested
# environment). The entrypoint is the command `benchfarm lab operator` runs locally.
#
# Elsewhere: `docker build -t benchfarm/operator:0.1.0 .` (base: the python slim image below).
# In the embedded lab, where no registry can be reached: `make image` builds this same file with
# buildah, its base made from Debian packages (bookworm's python3, see
# devlab/benchfarm_devlab/image.py) and passed as PYTHON_IMAGE. Both bases have python3, useradd
# and groupadd. Reproducible: with SOURCE_DATE_EPOCH and buildah's --timestamp, the same inputs give
# the same digest (no caches, no logs, no dated shadow entries; bytecode compiled with
# --invalidation-mode unchecked-hash, so a .pyc holds its source's hash, not its date, and Python
# never checks it against the source: imports read it as it is from the read-only root).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG SOURCE_DATE_EPOCH
# PIP_CONSTRAINT (not --constraint) also pins the build backend pip fetches to build benchfarm.
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 \
    PIP_CONSTRAINT=/src/constraints.txt
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY operator/ operator/
RUN python3 -m venv /opt/benchfarm \
 && /opt/benchfarm/bin/pip install --no-compile . \
 && find /opt/benchfarm -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/benchfarm/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/benchfarm/lib

FROM ${PYTHON_IMAGE}
ARG SOURCE_DATE_EPOCH
# The embedded lab's base already holds these packages (image.py): nothing is fetched there.
RUN if ! { command -v ssh && command -v rsync && command -v sigrok-cli; } >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends openssh-client rsync sigrok-cli \
      && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old \
           /var/log/apt /var/log/dpkg.log /var/log/alternatives.log; \
    fi \
 && groupadd --gid 10001 benchfarm \
 && useradd --uid 10001 --gid 10001 --no-create-home --no-log-init --home-dir /tmp \
      --shell /usr/sbin/nologin benchfarm
COPY --from=build /opt/benchfarm /opt/benchfarm
COPY exporters/device-types/ /etc/benchfarm/device-types/
ENV PATH=/opt/benchfarm/bin:/usr/local/bin:/usr/bin:/bin \
    BENCHFARM_DEVICE_TYPES=/etc/benchfarm/device-types \
    MPLCONFIGDIR=/tmp/matplotlib HOME=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["benchfarm", "operator"]
