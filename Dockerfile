# syntax=docker/dockerfile:1
# One image for the node plugin (`migdra kubelet-plugin`) and the reservation controller (`migdra
# controller`): the helm chart chooses the command.  `make image` builds it.  It holds the product
# packages only: the development cluster (devcluster/, `migdra sim`) is neither in the build context
# (.dockerignore) nor installed (no extras), so the root-run plugin's image carries no API server.
#
# The base is pinned to an exact Python patch release on Debian 12; pin it by digest in your own
# pipeline (--build-arg PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:...).  Nothing of the NVIDIA
# driver is in the image: the plugin loads the node's libnvidia-ml.so.1 from the driver root the chart
# mounts (docs/security.md), so one image serves every driver version.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dra_driver ./dra_driver
COPY kubeletplugin ./kubeletplugin
# A virtual environment with migdra and its runtime dependencies only (no dev or bench extras).
RUN python -m venv /opt/migdra \
 && /opt/migdra/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/migdra/bin/pip install --no-cache-dir . \
 && /opt/migdra/bin/migdra --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="migdra" \
      org.opencontainers.image.description="Kubernetes DRA driver for NVIDIA MIG" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/migdra/migdra"
COPY --from=build /opt/migdra /opt/migdra
ENV PATH=/opt/migdra/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root by default (the controller runs so); the chart runs the plugin as root with the privileges
# NVML's MIG changes need, and nothing else does.
USER 65532:65532
ENTRYPOINT ["migdra"]
CMD ["--help"]
