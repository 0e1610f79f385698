"""Settings from the environment: a flag wins over the environment, the environment over the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.cli import main
from autoscaler.settings import Settings
from policies.policy_file import parse_policy_document
from tests.helpers import workload_doc


@pytest.mark.parametrize(
    "command", [["run", "--once"], ["record", "--start", "now-1m", "--end", "now", "--out", "x.csv"]]
)
def test_a_bad_environment_setting_is_bad_input(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(
        '{"workloads": [{"target": {"namespace": "a", "name": "b"}, "maxReplicas": 2, '
        '"metrics": [{"name": "num_requests_waiting", "target": {"value": 1}}]}]}'
    )
    monkeypatch.setenv("VLLM_AUTOSCALER_METRICS_PORT", "lots")
    assert main([command[0], "--config", str(policy), *command[1:]]) == 2
    assert "bad VLLM_AUTOSCALER_* setting: metrics_port" in capsys.readouterr().err


def test_the_environment_wins_over_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    document = parse_policy_document({**workload_doc(), "prometheus": {"url": "http://file:9090", "timeout": 3}})
    monkeypatch.setenv("VLLM_AUTOSCALER_PROMETHEUS_URL", "http://env:9090")
    config = Settings().prometheus(document)
    assert (config.url, config.timeout) == ("http://env:9090", 3)


@pytest.mark.parametrize(
    ("lease_namespace", "pod_namespace", "service_account", "expected"),
    [
        ("ops", "in-pod", "from-token", "ops"),  # the setting wins
        (None, "in-pod", "from-token", "in-pod"),  # the downward API's, as deploy/ sets it
        (None, None, "from-token", "from-token"),  # the pod's service account's
        # Outside a cluster: the namespace deploy/ installs the controller in, so that a laptop's run --once
        # contends for the installed controller's Lease (it took "default" and wrote beside it).
        (None, None, None, "vllm-autoscaler"),
    ],
)
def test_the_controllers_own_namespace(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    lease_namespace: str | None,
    pod_namespace: str | None,
    service_account: str | None,
    expected: str,
) -> None:
    import autoscaler.settings as settings_module

    token = tmp_path / "namespace"
    if service_account is not None:
        token.write_text(service_account + "\n")
    monkeypatch.setattr(settings_module, "SERVICE_ACCOUNT_NAMESPACE", token)
    for name, value in (("VLLM_AUTOSCALER_LEASE_NAMESPACE", lease_namespace), ("POD_NAMESPACE", pod_namespace)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert settings_module.own_namespace(settings_module.Settings()) == expected
