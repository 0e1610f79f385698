"""Settings that are not per workload: from flags, the environment (``VLLM_AUTOSCALER_*``), the file.

A flag wins over the environment and the environment over the policy file (docs/contract.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from policies.policy_file import PolicyFile, PrometheusConfig


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="VLLM_AUTOSCALER_", extra="ignore")

    prometheus_url: str | None = None
    prometheus_timeout: float | None = Field(default=None, gt=0)
    prometheus_bearer_token_file: str | None = None
    prometheus_ca_file: str | None = None
    prometheus_insecure_skip_verify: bool | None = None
    log_format: Literal["json", "console"] = "json"
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    health_port: int | None = Field(default=None, ge=0, le=65535)
    bind_address: str = "0.0.0.0"
    leader_elect: bool | None = None
    lease_name: str = "vllm-autoscaler"
    lease_namespace: str | None = None
    lease_duration_s: float = Field(default=15.0, gt=0)
    renew_deadline_s: float = Field(default=10.0, gt=0)
    retry_period_s: float = Field(default=2.0, gt=0)
    dry_run: bool = False
    kubeconfig: str | None = None
    api_timeout_s: float = Field(default=10.0, gt=0)
    identity: str | None = None
    watch: bool = True

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    def prometheus(self, document: PolicyFile) -> PrometheusConfig:
        """The file's ``prometheus`` block with every setting from the environment (or a flag) on top."""
        overrides: dict[str, Any] = {}
        for field, key in (
            ("prometheus_url", "url"),
            ("prometheus_timeout", "timeout"),
            ("prometheus_bearer_token_file", "bearer_token_file"),
            ("prometheus_ca_file", "ca_file"),
            ("prometheus_insecure_skip_verify", "insecure_skip_verify"),
        ):
            value = getattr(self, field)
            if value is not None:
                overrides[key] = value
        return document.prometheus.model_copy(update=overrides)


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
CONTROLLER_NAMESPACE = "vllm-autoscaler"
"""The namespace ``deploy/`` installs the controller in. A process outside the cluster (a laptop's ``run --once``,
``status``) takes it unless told another, so that it contends for the very Lease the installed controller holds
and reads the state it writes."""


def own_namespace(settings: Settings) -> str:
    """Where this controller's Lease and state live: ``VLLM_AUTOSCALER_LEASE_NAMESPACE``, else the pod's own
    namespace (``POD_NAMESPACE`` or its service account's), else ``CONTROLLER_NAMESPACE``."""
    if settings.lease_namespace:
        return settings.lease_namespace
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        return CONTROLLER_NAMESPACE
