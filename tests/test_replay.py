"""`replay`: tick semantics, the decisions file, errors that name the line, the plot."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from autoscaler.cli import main
from policies.policy_file import load_policy_file, parse_policy_document
from policies.recorded import RecordedMetricsError, read_ticks
from simulations.replay import check_names, replay
from tests.helpers import workload_doc
from tests.test_policy_file import CONTRACT_EXAMPLE

KEY = "llm-serving/vllm-llama3-70b"


def _write(tmp_path: Path, rows: list[str], name: str = "recorded.csv") -> Path:
    path = tmp_path / name
    path.write_text("timestamp,workload,metric,value\n" + "\n".join(rows) + "\n")
    return path


def _decisions(tmp_path: Path, rows: list[str], config: str = CONTRACT_EXAMPLE) -> list[dict[str, str]]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(config)
    out = tmp_path / "decisions.csv"
    assert main(["replay", "--config", str(policy), "--metrics", str(_write(tmp_path, rows)), "--out", str(out)]) == 0
    return list(csv.DictReader(out.open()))


def test_replay_writes_one_row_per_workload_per_tick(tmp_path: Path) -> None:
    rows = _decisions(
        tmp_path,
        [
            f"1764000000,{KEY},replicas,2",
            f"1764000000,{KEY},num_requests_waiting,14.5",
            f"1764000000,{KEY},gpu_cache_usage_perc,0.71",
            f"1764000015,{KEY},num_requests_waiting,14.5",
            f"1764000030,{KEY},num_requests_waiting,3",
            f"1764000030,{KEY},gpu_cache_usage_perc,0.2",
            f"1764000045,{KEY},replicas,6",
            f"1764000045,{KEY},num_requests_waiting,3",
            f"1764000045,{KEY},gpu_cache_usage_perc,0.2",
        ],
    )
    assert list(rows[0]) == [
        "timestamp",
        "workload",
        "current_replicas",
        "recommended_replicas",
        "desired_replicas",
        "reason",
    ]
    got = [
        (r["timestamp"], r["current_replicas"], r["recommended_replicas"], r["desired_replicas"], r["reason"])
        for r in rows
    ]
    assert got == [
        # 14.5 waiting / 2 -> 8; Percent 100 per 15 s from 2 -> 4.
        ("1764000000", "2", "8", "4", "rate-limited"),
        # The KV metric is missing but the waiting one scales up: it goes ahead.
        ("1764000015", "4", "8", "8", "scale-up"),
        # 3 waiting -> 2, held by the 600 s scale-down window.
        ("1764000030", "8", "2", "8", "stabilized"),
        # The recorded count (6) wins over the decided one (8); the window holds it, and never raises it.
        ("1764000045", "6", "2", "6", "stabilized"),
    ]


def test_without_replicas_rows_the_first_count_is_min_replicas(tmp_path: Path) -> None:
    rows = _decisions(tmp_path, [f"2025-11-24T16:00:00Z,{KEY},num_requests_waiting,0"])
    assert rows[0]["current_replicas"] == "2" and rows[0]["timestamp"] == "2025-11-24T16:00:00Z"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            [f"1,{KEY},num_requests_waiting,1", "1,other/one,num_requests_waiting,1"],
            "recorded.csv:3: unknown workload 'other/one'",
        ),
        ([f"1,{KEY},num_requests_waiting,lots"], "recorded.csv:2: value 'lots' is not a number"),
        (
            [f"5,{KEY},num_requests_waiting,1", f"4,{KEY},num_requests_waiting,1"],
            "recorded.csv:3: timestamp 4 is earlier than 5",
        ),
        ([f"1,{KEY},queue_depth,1"], "recorded.csv:2: llm-serving/vllm-llama3-70b has no metric 'queue_depth'"),
        ([f"yesterday,{KEY},replicas,1"], "recorded.csv:2: timestamp 'yesterday' is neither Unix seconds nor RFC 3339"),
        ([f"1,{KEY},replicas,2.5"], "recorded.csv:2: replicas must be a whole number"),
        ([f"1,{KEY},replicas"], "recorded.csv:2: expected 4 columns, found 3"),
        (
            [f"1,{KEY},replicas,2", f"1,{KEY},replicas,3"],
            "recorded.csv:3: llm-serving/vllm-llama3-70b replicas at 1 repeats line 2",
        ),
    ],
)
def test_bad_input_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[str], message: str
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(CONTRACT_EXAMPLE)
    assert main(["replay", "--config", str(policy), "--metrics", str(_write(tmp_path, rows))]) == 2
    assert message in capsys.readouterr().err


def test_bad_header(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("time,workload,metric,value\n")
    with pytest.raises(RecordedMetricsError, match=r"x.csv:1: the header must be timestamp,workload,metric,value"):
        read_ticks(path)


def test_nan_is_no_value(tmp_path: Path) -> None:
    rows = _decisions(tmp_path, [f"0,{KEY},num_requests_waiting,NaN", f"0,{KEY},gpu_cache_usage_perc,nan"])
    assert rows[0]["reason"] == "metrics-unavailable"


def test_plot(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(CONTRACT_EXAMPLE)
    metrics = _write(tmp_path, [f"{t},{KEY},num_requests_waiting,{t % 40}" for t in range(0, 600, 15)])
    png = tmp_path / "replay.png"
    assert (
        main(
            [
                "replay",
                "--config",
                str(policy),
                "--metrics",
                str(metrics),
                "--out",
                str(tmp_path / "d.csv"),
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replay_api_is_deterministic() -> None:
    document = parse_policy_document(workload_doc(policy={"type": "predictive"}))
    text = "timestamp,workload,metric,value\n" + "".join(
        f"{t},llm-serving/vllm,num_requests_waiting,{(t * 7919) % 37}\n" for t in range(0, 3600, 15)
    )
    ticks = read_ticks(io.StringIO(text))
    check_names(document, ticks, "x")
    first = [(r.decision.desired, r.decision.reason) for r in replay(document, ticks)]
    second = [(r.decision.desired, r.decision.reason) for r in replay(document, ticks)]
    assert first == second and len(first) == 240


def test_scale_events_count_the_writes_the_daemon_would_make() -> None:
    """Recorded at 2 throughout while the policy wants 6: one write, then the daemon holds its own 6; not a
    'change' at every tick where the decision differs from the recording."""
    from simulations.replay import scale_events

    doc = parse_policy_document(workload_doc(behavior={"scaleUp": {"stabilizationWindowSeconds": 0}}))
    key = doc.workloads[0].key
    text = "timestamp,workload,metric,value\n" + "".join(
        f"{t},{key},replicas,2\n{t},{key},num_requests_waiting,12\n" for t in range(0, 150, 15)
    )
    path = Path(__import__("tempfile").mkdtemp()) / "r.csv"
    path.write_text(text)  # (a unit test: no fixture needed for one small file)
    rows = replay(doc, read_ticks(path))
    assert sum(1 for r in rows if r.decision.changes) == 10
    assert scale_events(rows) == 1


SAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "examples" / "recorded"


def test_the_shipped_recording_replays_and_is_what_simulate_writes(tmp_path: Path) -> None:
    """deploy/examples/recorded/day.csv is generated (simulate --record-metrics), not hand-made."""
    fresh = tmp_path / "day.csv"
    policy = str(SAMPLE / "policy.yaml")
    assert main(["simulate", "--config", policy, "--record-metrics", str(fresh)]) == 0
    assert fresh.read_text() == (SAMPLE / "day.csv").read_text()
    ticks = read_ticks(SAMPLE / "day.csv")
    rows = replay(load_policy_file(SAMPLE / "policy.yaml"), ticks)
    assert len(rows) == len(ticks) > 400
    assert main(["replay", "--config", policy, "--metrics", str(fresh), "--out", str(tmp_path / "d.csv")]) == 0


def test_an_idle_fleet_on_a_latency_quantile_scales_in(tmp_path: Path) -> None:
    """Eight replicas, no traffic for 30 minutes: the TTFT quantile is NaN at every tick (no request in its
    window), which is no load; the fleet scales in as the behavior allows, and holds where it has no row."""
    config = workload_doc(
        target={"namespace": "llm-serving", "name": "vllm-llama3-70b"},
        maxReplicas=8,
        metrics=[{"name": "time_to_first_token_p90_seconds", "target": {"type": "Value", "value": 1.5}}],
    )
    idle = [f"0,{KEY},replicas,8"] + [f"{t},{KEY},time_to_first_token_p90_seconds,NaN" for t in range(0, 1800, 15)]
    rows = _decisions(tmp_path, idle, json.dumps(config))
    assert rows[0]["desired_replicas"] == "8"  # the scale-down window (300 s) first
    assert rows[-1]["desired_replicas"] == "1" and {r["reason"] for r in rows} <= {"stabilized", "bounds"}
    missing = _decisions(tmp_path, [f"0,{KEY},replicas,8"] + [f"{t},{KEY},replicas,8" for t in range(15, 600, 15)])
    assert {r["desired_replicas"] for r in missing} == {"8"}  # no row at all: no value, held


def test_a_workload_that_learns_its_capacity_replays_what_it_learned_by(tmp_path: Path) -> None:
    """The TTFT quantile at the slo's target is a recorded metric of a workload that learns its capacity
    (``record`` writes it), and replay learns from it as the daemon did: ten minutes of 4 ready replicas
    carrying 1.5 times the seed within the SLO take the fleet asked for from 6 toward 4."""
    config = workload_doc(
        target={"namespace": "llm-serving", "name": "vllm-llama3-70b"},
        maxReplicas=10,
        slo={"ttftSeconds": 2},
        capacity={"promptTokensPerSecond": 1000, "runningRequests": 100, "learn": True},
        policy={"type": "predictive", "headroom": 0, "trend": {"maxGrowth": 0}},
        behavior={"scaleDown": {"stabilizationWindowSeconds": 0}},
    )
    del config["workloads"][0]["metrics"]
    rows = []
    for t in range(0, 720, 15):
        rows += [f"{t},{KEY},replicas,4", f"{t},{KEY},ready_replicas,4", f"{t},{KEY},prompt_tokens_per_second,6000"]
        rows += [f"{t},{KEY},num_requests_running,40", f"{t},{KEY},num_requests_waiting,0"]
        rows.append(f"{t},{KEY},time_to_first_token_slo_seconds,1.2")
    decided = _decisions(tmp_path, rows, json.dumps(config))
    assert decided[0]["desired_replicas"] == "6" and decided[-1]["desired_replicas"] == "4"
