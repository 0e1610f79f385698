"""The command line's edges: arguments checked before any work, durations in flags, plots without the extra."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from autoscaler.cli import build_parser, main
from simulations.replay import DECISION_HEADER
from tests.helpers import policy_file


def test_an_unknown_policy_type_is_refused_before_any_load_test(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    assert main(["simulate", "--policy", "foo"]) == 2
    assert time.monotonic() - started < 2.0
    assert "unknown policy type 'foo'" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "seconds"), [("300", 300.0), ("5m", 300.0), ("1h30m", 5400.0), ("0.5", 0.5)])
def test_flags_take_seconds_as_the_file_does(text: str, seconds: float) -> None:
    args = build_parser().parse_args(["simulate", "--cold-start", text])
    assert args.cold_start == seconds


def test_a_bad_duration_flag_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--cold-start", "5 minutes"]) == 2
    assert "not seconds or a duration" in capsys.readouterr().err


def test_plot_without_matplotlib_says_which_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the [sim] extra were not installed
    assert main(["simulate", "--plot", f"{tmp_path}/p.png"]) == 2
    assert "vllm-autoscaler[sim]" in capsys.readouterr().err


def test_run_without_a_cluster_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    from pathlib import Path

    policy = Path(str(tmp_path)) / "policy.yaml"
    policy.write_text((Path(__file__).resolve().parents[1] / "deploy/examples/policies/threshold.yaml").read_text())
    monkeypatch.setenv("KUBECONFIG", str(Path(str(tmp_path)) / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["run", "--config", str(policy), "--once", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "no cluster to talk to" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_bad_log_level_is_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VLLM_AUTOSCALER_LOG_LEVEL", "verbose")
    assert main(["run", "--config", "whatever.yaml", "--once"]) == 2
    assert "log_level" in capsys.readouterr().err


def test_a_broken_pipe_ends_quietly() -> None:
    import subprocess

    done = subprocess.run(
        f"{sys.executable} -m autoscaler validate --print-schema | head -c 10",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("what", ["deploy/controller", "deploy/overlays/production", "deploy/overlays/dry-run"])
def test_validate_takes_what_users_apply(what: str, capsys: pytest.CaptureFixture[str]) -> None:
    if __import__("shutil").which("kubectl") is None:
        pytest.skip("kubectl renders the kustomize directory")
    assert main(["validate", "--config", str(ROOT / what)]) == 0
    assert "ConfigMap vllm-autoscaler-policy, policy.yaml: valid" in capsys.readouterr().out


def test_validate_a_configmap_names_the_line_and_the_key_a_typo_meant(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    from pathlib import Path

    configmap = Path(str(tmp_path)) / "cm.yaml"
    configmap.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: p}\ndata:\n  policy.yaml: |\n    workloads:\n"
        "      - target: {namespace: llm, name: vllm}\n        maxReplica: 8\n        metrics:\n"
        "          - {name: num_requests_waiting, target: {type: AverageValue, value: 2}}\n"
    )
    assert main(["validate", "--config", str(configmap)]) == 2
    out = capsys.readouterr().out
    assert "workloads[0].maxReplica: unknown key; did you mean 'maxReplicas'? (line 8)" in out
    assert main(["validate", "--config", str(configmap), "-o", "json"]) == 2
    shown = json.loads(capsys.readouterr().out)
    assert shown["valid"] is False and len(shown["policies"][0]["problems"]) == 2


def test_replay_output_json_parses_and_quiet_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    sample = ROOT / "deploy" / "examples" / "recorded"
    args = ["replay", "--config", str(sample / "policy.yaml"), "--metrics", str(sample / "day.csv"), "-o", "json"]
    assert main(["-q", *args]) == 0
    captured = capsys.readouterr()
    shown = json.loads(captured.out)
    assert shown["ticks"] == len(shown["decisions"]) and shown["scale_events"] > 0
    assert list(shown["decisions"][0]) == DECISION_HEADER  # the CSV's columns, in its order
    assert captured.err == ""
    assert main([*args, "-q"]) == 0  # after the command too, as people type it
    assert json.loads((after := capsys.readouterr()).out) == shown and after.err == ""


def test_global_flags_given_before_the_command_stay_set() -> None:
    from autoscaler.cli import build_parser

    before = build_parser().parse_args(["-q", "-v", "validate", "--print-schema"])
    after = build_parser().parse_args(["validate", "--print-schema", "--debug"])
    neither = build_parser().parse_args(["validate", "--print-schema"])
    assert (before.quiet, before.debug) == (True, True)
    assert (after.quiet, after.debug) == (False, True)
    assert (neither.quiet, neither.debug) == (False, False)


def test_validate_says_when_a_workload_goes_to_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    activation = {"query": "sum(gateway_queued)", "threshold": 1, "idleSeconds": "12m"}
    policy = policy_file(tmp_path, minReplicas=0, activation=activation)
    assert main(["validate", "--config", str(policy)]) == 0
    assert "0-10 replicas" in (out := capsys.readouterr().out) and "to zero after 720 s idle, woken above 1" in out
    assert main(["validate", "--config", str(policy), "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)["policies"][0]["workloads"][0]
    assert shown["activation"] == {"query": "sum(gateway_queued)", "threshold": 1.0, "idleSeconds": 720}


@pytest.mark.parametrize("content", ["just a hostname\n", "garbage: [\n", "- a\n- list\n"])
def test_a_file_that_is_not_a_kubeconfig_is_named_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(content)
    policy = policy_file(tmp_path)
    for command in (["run", "--config", str(policy), "--once", "--dry-run"], ["status"]):
        assert main([*command, "--kubeconfig", str(kubeconfig)]) == 1
        err = capsys.readouterr().err
        assert f"{kubeconfig} is not a kubeconfig" in err and len(err.strip().splitlines()) == 1, err


def test_validate_given_a_scaledobject_points_to_import_keda(capsys: pytest.CaptureFixture[str]) -> None:
    article = Path(__file__).resolve().parents[1] / "deploy/examples/keda-scaledobject-article.yaml"
    assert main(["validate", "--config", str(article)]) == 2
    assert f"a KEDA ScaledObject: `vllm-autoscaler import-keda {article}` writes its policy" in capsys.readouterr().out


CONFIGMAP = (
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: p}\ndata:\n  policy.yaml: |\n    workloads:\n"
    "    - target: {namespace: a, name: b}\n      maxReplicas: 4\n"
    "      metrics: [{name: num_requests_waiting, target: {value: 2}}]\n"
)


def test_the_commands_that_read_a_policy_take_the_configmap_users_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configmap = tmp_path / "policy-configmap.yaml"
    configmap.write_text(CONFIGMAP)
    sample = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "recorded"
    replayed = ["replay", "--config", str(configmap), "--metrics", str(sample / "day.csv"), "-o", "json"]
    assert main(replayed) == 2  # read: its workload a/b is not the recording's
    assert "unknown workload 'llm-serving/vllm-llama3-70b'; the policy file has a/b" in capsys.readouterr().err
    assert main(["simulate", "--config", str(configmap), "--policy", "nonesuch"]) == 2
    assert "unknown policy type 'nonesuch'" in capsys.readouterr().err  # the file was read: the flag is next
    assert main(["run", "--config", str(configmap), "--once", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "ConfigMap p, policy.yaml holds the policy; run reads a policy file" in err


def test_a_key_known_elsewhere_is_not_suggested_for_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = policy_file(tmp_path)
    policy.write_text("apiVersion: v1\n" + policy.read_text())
    assert main(["validate", "--config", str(policy)]) == 2
    out = capsys.readouterr().out
    assert "apiVersion: unknown key (line 1)" in out and "did you mean" not in out


@pytest.mark.parametrize(
    ("metrics", "warned"),
    [
        (["num_requests_waiting", "kv_cache_usage_perc"], True),  # the design article's pair
        (["num_requests_waiting", "gpu_cache_usage_perc"], True),  # the KV gauge's older name
        (["num_requests_waiting"], True),
        (["prompt_tokens_per_second", "num_requests_waiting"], False),
        (["num_requests_running", "kv_cache_usage_perc"], False),
    ],
)
def test_validate_warns_where_the_signals_cannot_see_prefill_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], metrics: list[str], warned: bool
) -> None:
    specs = [
        {"name": n, "target": {"type": "Value" if "cache" in n else "AverageValue", "value": 0.8}} for n in metrics
    ]
    policy = policy_file(tmp_path, metrics=specs)
    assert main(["validate", "--config", str(policy)]) == 0  # a warning, not a problem
    err = capsys.readouterr().err
    assert ("do not see prefill load" in err) is warned
    assert main(["validate", "--config", str(policy), "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)["policies"][0]["workloads"][0]
    assert bool(shown["warnings"]) is warned
