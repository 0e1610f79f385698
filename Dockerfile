# syntax=docker/dockerfile:1
# Build stage: a wheel of the project and of everything it needs.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY autoscaler ./autoscaler
COPY policies ./policies
COPY simulations ./simulations
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# Run stage: the daemon's wheels installed (not the [sim] extra's plotting), nothing else.
FROM python:3.11-slim
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels vllm-autoscaler \
    && groupadd --gid 10001 autoscaler && useradd --uid 10001 --gid 10001 --no-create-home autoscaler
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["vllm-autoscaler"]
CMD ["run", "--config", "/etc/vllm-autoscaler/policy.yaml"]
