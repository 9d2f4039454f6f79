# benchfarm operator image: the operator, the labgrid client and the MinIO SDK, nothing else.
# Base images are pinned by version; Python packages by constraints.txt (pip freeze of a tested
# environment). The entrypoint is the command `benchfarm lab operator` runs locally.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY operator/ operator/
RUN python -m venv /opt/benchfarm \
 && /opt/benchfarm/bin/pip install --constraint constraints.txt . \
 && find /opt/benchfarm -name '__pycache__' -prune -exec rm -rf {} +

FROM ${PYTHON_IMAGE}
RUN groupadd --gid 10001 benchfarm \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin benchfarm
COPY --from=build /opt/benchfarm /opt/benchfarm
COPY exporters/device-types/ /etc/benchfarm/device-types/
ENV PATH=/opt/benchfarm/bin:/usr/local/bin:/usr/bin:/bin \
    BENCHFARM_DEVICE_TYPES=/etc/benchfarm/device-types \
    MPLCONFIGDIR=/tmp/matplotlib HOME=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["benchfarm", "operator"]
