"""``vllm-autoscaler validate``: check policy files (or manifests holding them) and say what each would do."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from autoscaler.cli.common import EXIT_BAD_INPUT, EXIT_OK, _error, _policy_texts
from policies.metric_names import blind_to_prefill
from policies.policy_file import (
    PolicyFileError,
    Workload,
    json_schema,
    parse_policy_text,
)


def cmd_validate(args: argparse.Namespace) -> int:
    if args.print_schema:
        print(json.dumps(json_schema(), indent=2))
        return EXIT_OK
    if not args.config:
        _error("validate needs --config FILE (or --print-schema)")
        return EXIT_BAD_INPUT
    try:
        policies = _policy_texts(args.config)
    except PolicyFileError as exc:
        print("\n".join(exc.problems))
        print(f"{exc.source}: {len(exc.problems)} problem(s)", file=sys.stderr)
        return EXIT_BAD_INPUT
    failed = 0
    report: list[dict[str, Any]] = []
    for source, text, offset in policies:
        try:
            document = parse_policy_text(text, source, offset)
        except PolicyFileError as exc:
            failed += 1
            report.append({"source": source, "valid": False, "problems": exc.problems})
            if args.output != "json":
                for problem in exc.problems:
                    print(f"{source}: {problem}" if len(policies) > 1 else problem)
                print(f"{source}: {len(exc.problems)} problem(s)", file=sys.stderr)
            continue
        warnings = {w.key: _signal_warnings(w) for w in document.workloads}
        report.append(
            {"source": source, "valid": True, "workloads": [_summary(w, warnings[w.key]) for w in document.workloads]}
        )
        if args.output != "json":
            for w in document.workloads:
                print(_line(w))
                for warning in warnings[w.key]:
                    print(f"warning: {w.key}: {warning}", file=sys.stderr)
            print(f"{source}: valid")
    if args.output == "json":
        print(json.dumps({"valid": failed == 0, "policies": report}, indent=2))
    return EXIT_BAD_INPUT if failed else EXIT_OK


def _summary(w: Workload, warnings: list[str]) -> dict[str, Any]:
    """A valid workload as ``-o json`` reports it."""
    return {
        "workload": w.key,
        "policy": w.policy_type,
        "minReplicas": w.min_replicas,
        "maxReplicas": w.max_replicas,
        "metrics": [m.name for m in w.metrics],
        **({"activation": w.activation.model_dump(by_alias=True)} if w.activation else {}),
        **({"slo": w.slo.model_dump(by_alias=True)} if w.slo else {}),
        **({"capacity": w.capacity.model_dump(by_alias=True)} if w.capacity else {}),
        "warnings": warnings,
    }


def _line(w: Workload) -> str:
    """A valid workload in one line: its policy, bounds, signals, zero and SLO."""
    zero = (
        f"; to zero after {w.activation.idle_seconds} s idle, woken above {w.activation.threshold:g} "
        "on its activation query"
        if w.activation
        else ""
    )
    slo = f"; SLO: {w.slo.ttft_seconds:g} s to first token for {w.slo.target:.2%} of requests" if w.slo else ""
    signals = f"metrics {', '.join(m.name for m in w.metrics)}" if w.metrics else "no metrics yet"
    if w.capacity is not None:
        learned = ", learned" if w.capacity.learn else ""
        signals += f" (built from capacity: {w.capacity.prompt_tokens_per_second:g} prompt tokens/s{learned})"
    return f"{w.key}: {w.policy_type}, {w.min_replicas}-{w.max_replicas} replicas, {signals}{zero}{slo}"


def _signal_warnings(workload: Workload) -> list[str]:
    """What ``validate`` warns of in a valid workload: signals that cannot see what the SLO depends on, or
    none yet (an slo alone: simulate measures the capacity, the daemon needs it)."""
    if workload.needs_capacity:
        return [
            "an slo and no metrics or capacity: simulate measures what one replica sustains within the slo "
            "(--write-config writes it as capacity); run, record and replay need it"
        ]
    if not blind_to_prefill([m.name for m in workload.metrics]):
        return []
    return [
        "its only signals are waiting requests or KV-cache usage, which do not see prefill load: with a large "
        "max_num_seqs nothing waits while the time to first token grows inside the batch, and the KV gauge is the "
        "busiest replica's reservation; add prompt_tokens_per_second (docs/decisions/default-signals.md)"
    ]


def add_parser(sub: Any) -> None:
    """The ``validate`` command's arguments."""
    p = sub.add_parser("validate", help="check a policy file; print each problem with its field path")
    p.add_argument("--config", metavar="FILE")
    p.add_argument("--print-schema", action="store_true", help="print the policy file's JSON Schema and exit")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_validate)
