# syntax=docker/dockerfile:1
# The daemon's image: the daemon and its runtime dependencies, each pinned by requirements.lock with its hashes
# (regenerate: pip-compile --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url
# --no-emit-find-links --output-file=requirements.lock pyproject.toml). Pin the base by digest where you build:
# docker build --build-arg BASE=python:3.11-slim@sha256:<digest> (docker buildx imagetools inspect python:3.11-slim).
ARG BASE=python:3.11-slim

# Build stage: the locked wheels, checked against their hashes, and the project's own wheel.
FROM ${BASE} AS build
WORKDIR /src
COPY requirements.lock pyproject.toml README.md ./
COPY autoscaler ./autoscaler
COPY policies ./policies
# The daemon and its command line alone: the simulator, the test kit and the bench stay in the source tree
# (tests/test_daemon.py runs validate, run and status without them).
RUN rm -rf autoscaler/testing autoscaler/bench.py \
    && pip download --no-cache-dir --require-hashes --no-deps --dest /wheels -r requirements.lock \
    && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# Run stage: exactly the locked set installed (not the [sim] extra's plotting), then the daemon, nothing else.
FROM ${BASE}
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    --mount=type=bind,from=build,source=/src/requirements.lock,target=/tmp/requirements.lock \
    pip install --no-cache-dir --no-index --find-links=/wheels --require-hashes -r /tmp/requirements.lock \
    && pip install --no-cache-dir --no-index --no-deps /wheels/vllm_autoscaler-*.whl \
    && groupadd --gid 10001 autoscaler && useradd --uid 10001 --gid 10001 --no-create-home autoscaler
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["vllm-autoscaler"]
CMD ["run", "--config", "/etc/vllm-autoscaler/policy.yaml"]
