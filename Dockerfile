# The healer image. Everything healer runs in a cluster runs from it: `healer sidecar` (injected next
# to Triton), `healer webhook` (the injection webhook) and the rollback and drill steps, which the
# rendered WorkflowTemplates run as `python -m hera.workflows.runner -e workflows.<module>:<step>`.
#
#   docker build -t REGISTRY/healer:0.1.0 .     # nothing is published: build it, push it to your registry
#   make image                                  # without docker: dist/healer-0.1.0.oci.tar (README, step 3)
#
# No ENTRYPOINT: the containers name their program (`args: [healer, sidecar, ...]`, the templates'
# `command: [python]`), both found on PATH in the virtualenv below.
#
# The base is pinned by its full version tag. Pin it by digest as well when you build
# (python:3.11.14-slim-bookworm@sha256:...): the digest could not be resolved where this file was
# written (no registry access, no container engine), and an unverified digest would be worse than none.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: wheels for healer and every dependency, installed into a virtualenv -------------------------
FROM ${PYTHON_IMAGE} AS build
ARG HEALER_VERSION=0.1.0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY healer ./healer
COPY probes ./probes
COPY workflows ./workflows
# Every dependency ships manylinux wheels for CPython 3.11 (numpy, gevent, PyYAML, ...): nothing is
# compiled, and --only-binary makes a missing wheel an error rather than a compiler run.
RUN pip wheel --wheel-dir /wheels --only-binary=:all: --no-binary=healer . \
 && python -m venv --without-pip /opt/healer \
 && pip --python /opt/healer/bin/python install --no-index --find-links /wheels "healer==${HEALER_VERSION}" \
 && /opt/healer/bin/healer --version

# ---- the image: the interpreter of the same base, the virtualenv, a non-root user ----------------------
FROM ${PYTHON_IMAGE}
ARG HEALER_VERSION=0.1.0
LABEL org.opencontainers.image.title="healer" \
      org.opencontainers.image.description="Self-healing for NVIDIA Triton Inference Server: probe sidecar, injection webhook, rollback steps" \
      org.opencontainers.image.version="${HEALER_VERSION}" \
      org.opencontainers.image.source="https://github.com/healer-dev/healer" \
      org.opencontainers.image.licenses="Apache-2.0"
# uid/gid 10001 (healer/core/pod_contract.py HEALER_UID): the sidecar and the rollback's pods run as it and
# write the same model repository and ledger. No home, no login shell.
RUN groupadd --system --gid 10001 healer \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin healer
COPY --from=build /opt/healer /opt/healer
# The root filesystem is read-only in the pods: no bytecode written at run time; logs unbuffered.
ENV PATH=/opt/healer/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
CMD ["healer", "--help"]
