"""The ``vllm-autoscaler`` command line (docs/contract.md). Exit status 2 means bad input."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autoscaler import __version__
from policies.metric_names import blind_to_prefill
from policies.policy_file import (
    PolicyFile,
    PolicyFileError,
    Workload,
    json_schema,
    parse_policy_document,
    parse_policy_text,
)
from policies.recorded import RecordedMetricsError, read_ticks
from policies.registry import policy_class
from policies.spec import Slo, parse_duration

if TYPE_CHECKING:
    from autoscaler.settings import Settings
    from simulations.compare import Comparison
    from simulations.replica_model import ReplicaModel

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERRUPTED = 130  # the shell's 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(BaseException):
    """SIGTERM, raised where the command is, so that it unwinds as on Ctrl-C: worker processes stopped, no
    traceback. ``run`` installs its own handler (a clean shutdown)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


DEFAULT_SLO_TTFT_S = 2.0  # simulate's SLO where neither a flag nor the file's slo block gives one
DEFAULT_SLO_TARGET = 0.99
QUIET = {"on": False}  # -q: no notes, no progress; errors are always said


def _error(message: str) -> None:
    print(f"vllm-autoscaler: {message}", file=sys.stderr)


def _note(message: str) -> None:
    if not QUIET["on"]:
        print(f"vllm-autoscaler: note: {message}", file=sys.stderr)


def _unwritable(*paths: str | None) -> str | None:
    """Why an output file cannot be written, checked before the work that produces it; ``None`` if all can."""
    for path in paths:
        if not path or path == "-":
            continue
        target = Path(path)
        folder = target.parent if str(target.parent) else Path(".")
        if target.is_dir():
            return f"{path}: is a directory"
        if not folder.is_dir():
            return f"{path}: no such directory {folder}"
        if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
            return f"{path}: not writable"
    return None


def _finite(text: str) -> float:
    """An option's number: ``inf`` and ``nan`` parse as floats but mean nothing as seconds or fractions."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _seconds(text: str) -> float:
    """A flag's seconds, in the policy file's syntax: a number (``300``, ``0.5``) or a duration (``5m``)."""
    try:
        float(text)
    except ValueError:
        pass
    else:
        return _finite(text)
    try:
        return float(parse_duration(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not seconds or a duration such as 90s, 5m or 1h30m") from None


def _window(text: str) -> tuple[int, int | None]:
    """``START:END``, each a duration (``7d``, ``36h``, ``90m``, seconds) after the trace's first request;
    either may be left out (``:2d``, ``30d:``)."""
    start, colon, end = text.partition(":")
    try:
        if not colon:
            raise ValueError("no ':'")
        first = parse_duration(start) if start.strip() else 0
        last = parse_duration(end) if end.strip() else None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not START:END, each a duration such as 7d, 36h, 90m or seconds (either may be left out)"
        ) from None
    if last is not None and last <= first:
        raise argparse.ArgumentTypeError(f"{text!r}: the window ends before it starts")
    return first, last


def _whole_number(least: int) -> Callable[[str], int]:
    """An option's count: a whole number of at least ``least`` (``--seed`` 0, ``--jobs`` 1)."""

    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < least:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, {least} or more")
        return int(text)

    return parse


_seed, _jobs = _whole_number(0), _whole_number(1)


def _no_plotting(plot: str | None) -> str | None:
    """Why ``--plot`` cannot be drawn (matplotlib is the ``[sim]`` extra), said before the work; None if it can."""
    if not plot:
        return None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib: pip install 'vllm-autoscaler[sim]'"
    return None


def _write_failed(exc: OSError, path: str | None) -> int:
    """An output that passed ``_unwritable`` and still failed (a full disk, a vanished folder): one line,
    exit 1, whatever was already printed kept."""
    _error(f"cannot write {exc.filename or path}: {exc.strerror or exc}")
    return EXIT_FAILED


def _load(path: str, manifests: bool = True) -> PolicyFile | None:
    """The policy of ``--config``: a policy file, or (with ``manifests``) what a user applies and ``validate``
    reads, a ConfigMap or a kustomize directory that holds exactly one policy."""
    try:
        texts = _policy_texts(path)
        if len(texts) > 1:
            sources = "; ".join(source for source, _, _ in texts)
            raise PolicyFileError(path, [f"(file): holds {len(texts)} policies ({sources}): give one as a file"])
        source, text, offset = texts[0]
        if source != path and not manifests:
            raise PolicyFileError(
                path,
                [
                    f"(file): {source.removeprefix(path + ': ')} holds the policy; run reads a policy file (the pod "
                    "mounts the ConfigMap's key as one): give that file"
                ],
            )
        return parse_policy_text(text, source, offset)
    except PolicyFileError as exc:
        _error(f"{exc.source}: invalid policy file")
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def _field(node: Any, key: str) -> Any:
    """The value node under ``key`` of a YAML mapping node (None if absent or not a mapping)."""
    if not isinstance(node, yaml.MappingNode):
        return None
    return next((v for k, v in node.value if getattr(k, "value", None) == key), None)


def _policy_texts(path: str) -> list[tuple[str, str, int]]:
    """Each policy that what a user applies holds, as ``(source, text, line offset)``: a policy file as it
    is; a ConfigMap (or a file of several documents) by each ``data`` key that holds a policy; a kustomize
    directory by the ConfigMaps ``kubectl kustomize`` renders. Raises ``PolicyFileError`` if unreadable."""
    folder = Path(path)
    if folder.is_dir():
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise PolicyFileError(path, ["(file): a kustomize directory needs kubectl to render it"])
        done = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise PolicyFileError(path, [f"(file): kubectl kustomize failed: {done.stderr.strip()[:300]}"])
        text, offsets = done.stdout, False
    else:
        try:
            text = folder.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyFileError(path, [f"(file): cannot read: {exc}"]) from None
        offsets = True
    try:
        nodes = [n for n in yaml.compose_all(text) if n is not None]
    except yaml.YAMLError:
        return [(path, text, 0)]  # let the policy parser word the syntax error
    found: list[tuple[str, str, int]] = []
    objects = [node for node in nodes if _field(node, "kind") is not None]
    for node in objects:
        data = _field(node, "data")
        if getattr(_field(node, "kind"), "value", None) != "ConfigMap" or not isinstance(data, yaml.MappingNode):
            continue
        name = getattr(_field(_field(node, "metadata"), "name"), "value", "?")
        for key, value in data.value:
            body = getattr(value, "value", "")
            if isinstance(body, str) and (key.value.endswith((".yaml", ".yml", ".json")) or "workloads" in body):
                offset = (value.start_mark.line + (1 if value.style in ("|", ">") else 0)) if offsets else 0
                found.append((f"{path}: ConfigMap {name}, {key.value}", body, offset))
    if objects and not found:
        kinds = {getattr(_field(node, "kind"), "value", None) for node in objects}
        hint = (
            f"; a KEDA ScaledObject: `vllm-autoscaler import-keda {path}` writes its policy"
            if "ScaledObject" in kinds
            else ""
        )
        raise PolicyFileError(
            path, [f"(file): no ConfigMap here holds a policy (a data key ending .yaml or .json){hint}"]
        )
    return found or [(path, text, 0)]


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
        workloads = [
            {
                "workload": w.key,
                "policy": w.policy_type,
                "minReplicas": w.min_replicas,
                "maxReplicas": w.max_replicas,
                "metrics": [m.name for m in w.metrics],
                **({"activation": w.activation.model_dump(by_alias=True)} if w.activation else {}),
                **({"slo": w.slo.model_dump(by_alias=True)} if w.slo else {}),
                **({"capacity": w.capacity.model_dump(by_alias=True)} if w.capacity else {}),
                "warnings": warnings[w.key],
            }
            for w in document.workloads
        ]
        report.append({"source": source, "valid": True, "workloads": workloads})
        if args.output != "json":
            for w in document.workloads:
                zero = (
                    f"; to zero after {w.activation.idle_seconds} s idle, woken above {w.activation.threshold:g} "
                    "on its activation query"
                    if w.activation
                    else ""
                )
                slo = (
                    f"; SLO: {w.slo.ttft_seconds:g} s to first token for {w.slo.target:.2%} of requests"
                    if w.slo
                    else ""
                )
                signals = f"metrics {', '.join(m.name for m in w.metrics)}" if w.metrics else "no metrics yet"
                if w.capacity is not None:
                    learned = ", learned" if w.capacity.learn else ""
                    signals += (
                        f" (built from capacity: {w.capacity.prompt_tokens_per_second:g} prompt tokens/s{learned})"
                    )
                print(f"{w.key}: {w.policy_type}, {w.min_replicas}-{w.max_replicas} replicas, {signals}{zero}{slo}")
                for warning in warnings[w.key]:
                    print(f"warning: {w.key}: {warning}", file=sys.stderr)
            print(f"{source}: valid")
    if args.output == "json":
        print(json.dumps({"valid": failed == 0, "policies": report}, indent=2))
    return EXIT_BAD_INPUT if failed else EXIT_OK


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
        "busiest replica's reservation; add prompt_tokens_per_second (docs/findings.md)"
    ]


def cmd_replay(args: argparse.Namespace) -> int:
    from simulations.replay import (
        DECISION_HEADER,
        check_names,
        decision_fields,
        plot_decisions,
        replay,
        scale_events,
        write_decisions,
    )

    document = _load(args.config)
    if document is None:
        return EXIT_BAD_INPUT
    if unmeasured := next((w for w in document.workloads if w.needs_capacity), None):
        _error(f"{args.config}: {unmeasured.key}: capacity: needed to replay a workload with an slo and no metrics")
        return EXIT_BAD_INPUT
    if problem := _unwritable(args.out, args.plot) or _no_plotting(args.plot):
        _error(problem)
        return EXIT_BAD_INPUT
    try:
        ticks = read_ticks(args.metrics)
        check_names(document, ticks, args.metrics)
    except RecordedMetricsError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    rows = replay(document, ticks)
    written = args.out
    try:
        if args.out and args.out != "-":
            with open(args.out, "w", newline="", encoding="utf-8") as handle:
                write_decisions(handle, rows)
        elif args.output != "json":
            write_decisions(sys.stdout, rows)
        if args.output == "json":
            decisions = [dict(zip(DECISION_HEADER, decision_fields(r), strict=True)) for r in rows]
            summary = {"ticks": len(ticks), "scale_events": scale_events(rows), "decisions": decisions}
            print(json.dumps(summary, indent=2))
        if args.plot:
            written = args.plot
            plot_decisions(args.plot, document, rows)
    except OSError as exc:
        return _write_failed(exc, written)
    if not QUIET["on"]:
        print(
            f"replayed {len(ticks)} ticks for {len(document.workloads)} workload(s): {scale_events(rows)} scale events",
            file=sys.stderr,
        )
    return EXIT_OK


class _StderrNote:
    """Notes on stderr, a note that ends in ``""`` continued by the next (a load test's, around the test)."""

    def __init__(self) -> None:
        self.continuing = False

    def __call__(self, text: str, end: str) -> None:
        if not QUIET["on"]:
            print(text if self.continuing else f"vllm-autoscaler: note: {text}", end=end, file=sys.stderr, flush=True)
        self.continuing = end == ""


def cmd_simulate(args: argparse.Namespace) -> int:
    from simulations import report as reporting
    from simulations.builtin import BUILTIN_GROW_TO, sized_builtin, with_measured_capacity
    from simulations.compare import DEFAULT_POLICY_TYPES, compare
    from simulations.replica_model import parse_overrides
    from simulations.runner import long_run_hint
    from simulations.traces import TraceError, load_trace

    document = None
    sizing: dict[str, Any] = {}  # how the built-in workload's targets were sized, for the report
    if args.config:
        document = _load(args.config)
        if document is None:
            return EXIT_BAD_INPUT
        if len(document.workloads) > 1:
            print(f"vllm-autoscaler: simulating the first workload, {document.workloads[0].key}", file=sys.stderr)
    if (args.slo_target is not None and not 0 < args.slo_target <= 1) or (
        args.slo_ttft is not None and args.slo_ttft <= 0
    ):
        _error("--slo-target must be in (0, 1] and --slo-ttft positive")
        return EXIT_BAD_INPUT
    args.slo_ttft, args.slo_target = _simulated_slo(args, document)
    try:  # before any expensive work: an unknown --policy is said at once
        for policy_type in args.policy or []:
            policy_class(policy_type)
    except KeyError as exc:
        _error(exc.args[0])
        return EXIT_BAD_INPUT
    if args.cold_start is not None and args.cold_start < 0:
        _error("--cold-start must be a number of seconds, 0 or more")
        return EXIT_BAD_INPUT
    if problem := _unwritable(args.out, args.plot, args.write_config, args.record_metrics) or _no_plotting(args.plot):
        _error(problem)
        return EXIT_BAD_INPUT
    try:
        cold = args.cold_start
        if cold is None and document is not None and document.workloads[0].cold_start_seconds != "auto":
            cold = document.workloads[0].cold_start_seconds
        base = None
        if args.replica_file:
            from simulations.calibration import load_replica_file

            base = load_replica_file(args.replica_file)
        model = parse_overrides([*([f"cold_start_s={cold}"] if cold is not None else []), *args.replica], base)
        trace = load_trace(args.trace, args.format, args.seed, args.rate_scale, args.lengths_from)
        if args.window is not None:
            trace = trace.window(*args.window)
        if document is None:
            document, sizing = sized_builtin(model, trace, args.slo_ttft, args.slo_target, _StderrNote())
        elif document.workloads[0].needs_capacity:
            document, sizing = with_measured_capacity(
                document, model, trace, args.slo_ttft, args.slo_target, _StderrNote()
            )
        document = _with_slo(document, args.slo_ttft, args.slo_target)
        workload = document.workloads[0]
        if args.time_scale != 1.0:
            trace = trace.scaled(args.time_scale)
        if hint := long_run_hint(trace, model):
            _note(hint)
        types = list(dict.fromkeys(args.policy or ([workload.policy_type] if args.config else DEFAULT_POLICY_TYPES)))
        grow_to = None if args.config else BUILTIN_GROW_TO
        comparison = compare(
            trace,
            model,
            document,
            types,
            args.slo_ttft,
            args.slo_target,
            args.tune,
            progress=not QUIET["on"],
            grow_to=grow_to,
            workers=args.jobs,
        )
        if comparison.workload.max_replicas != workload.max_replicas:
            _note(
                f"no fixed fleet of up to {workload.max_replicas} replicas met the SLO, so "
                f"the built-in workload ran with maxReplicas {comparison.workload.max_replicas}"
            )
            document = document.model_copy(update={"workloads": [comparison.workload]})
    except BrokenProcessPool:
        _error("a simulation worker process died (killed, perhaps for memory); nothing was written")
        return EXIT_FAILED
    except (TraceError, ValueError, KeyError, PolicyFileError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        _error(message)
        return EXIT_BAD_INPUT
    window = {} if args.window is None else {"window_s": list(args.window)}
    data = reporting.report(comparison, {"seed": args.seed, "time_scale": args.time_scale, **window, **sizing})
    if args.output != "json":
        print(reporting.table(data), flush=True)
    if _builtin_scenarios(args):
        idle = _idle_model(model, document, args)
        data["scale_to_zero"] = reporting.report(idle, {"seed": args.seed})
        if args.output != "json":
            print("\nA low-traffic model with idle hours, allowed to scale to zero (minReplicas 0, activation):")
            print(reporting.table(data["scale_to_zero"]))
    if args.output == "json":
        print(json.dumps(data, indent=2))
    if not QUIET["on"]:
        print(f"(simulated in {comparison.elapsed_s:.1f} s)", file=sys.stderr)
    written = args.out
    try:
        if args.out:
            reporting.dump(args.out, data)
        if args.plot:
            written = args.plot
            reporting.plot(args.plot, comparison)
        if args.record_metrics:
            written = args.record_metrics
            assert document is not None
            _record_simulated(args.record_metrics, document, comparison)
        if args.write_config:
            written = args.write_config
            assert document is not None  # the file's, or the built-in one
            return _write_config(args.write_config, document, comparison, data, types)
    except OSError as exc:
        return _write_failed(exc, written)
    return EXIT_OK


def _simulated_slo(args: argparse.Namespace, document: PolicyFile | None) -> tuple[float, float]:
    """The SLO a simulation judges by: each flag given, else the file's ``slo`` block, else 2 s for 99 %."""
    slo = document.workloads[0].slo if document is not None else None
    ttft = args.slo_ttft if args.slo_ttft is not None else (slo.ttft_seconds if slo else DEFAULT_SLO_TTFT_S)
    target = args.slo_target if args.slo_target is not None else (slo.target if slo else DEFAULT_SLO_TARGET)
    return ttft, target


def _with_slo(document: PolicyFile, ttft: float, target: float) -> PolicyFile:
    """The document whose first workload says the SLO it is simulated for, so that ``--write-config`` writes it."""
    given = document.workloads[0].slo
    slo = Slo(ttftSeconds=ttft, target=target, windowSeconds=given.window_seconds if given else 3600)
    workload = document.workloads[0].model_copy(update={"slo": slo})
    return document.model_copy(update={"workloads": [workload, *document.workloads[1:]]})


def _builtin_scenarios(args: argparse.Namespace) -> bool:
    """``simulate`` with nothing chosen runs the built-in scenarios: the built-in day, then the idle model."""
    chosen = (args.trace, args.config, args.window, args.policy, args.lengths_from, args.format)
    return all(c is None or c == [] for c in chosen) and not args.tune and args.time_scale == 1.0


def _idle_model(model: ReplicaModel, document: PolicyFile, args: argparse.Namespace) -> Comparison:
    """The built-in low-traffic model with idle hours (``builtin.idle_model_document``), compared as the day is."""
    from simulations.builtin import idle_model_document
    from simulations.compare import compare
    from simulations.traces import synthetic_idle

    idle = idle_model_document(document)
    return compare(
        synthetic_idle(args.seed), model, idle, ["predictive"], args.slo_ttft, args.slo_target, progress=not QUIET["on"]
    )


SIMULATED_START = 1_767_225_600.0  # 2026-01-01T00:00:00Z: recorded stamps of a simulated run start here


def _record_simulated(path: str, document: PolicyFile, comparison: Comparison) -> None:
    """``simulate --record-metrics``: the fleet run once more under the workload's own policy, its metrics
    tick by tick written as ``record`` would have read them, for ``replay``."""
    from policies.recorded import observed_rows, write_rows
    from simulations.contenders import policy_contender
    from simulations.runner import run

    contender = policy_contender(document, comparison.workload, comparison.model)
    contender.observed = []
    run(comparison.trace, comparison.model, contender, comparison.initial_replicas, comparison.slo_ttft, False)
    rows = observed_rows(comparison.workload.key, contender.observed, SIMULATED_START)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        count = write_rows(handle, rows)
    print(f"vllm-autoscaler: wrote {count} rows of {len(contender.observed)} ticks to {path}", file=sys.stderr)


def _write_config(
    path: str, document: PolicyFile, comparison: Comparison, data: dict[str, Any], types: list[str]
) -> int:
    """``simulate --write-config``: the cheapest compared policy that met the SLO, as a policy file for
    ``run``, with a comment saying what it was measured on. Baselines are not policies one deploys: a
    cheaper fixed fleet is said on standard error, beside the file."""
    from simulations import report as reporting
    from simulations.deployable import deployable
    from simulations.runner import floor_to

    meeting = [r for r in comparison.results if r.policy in types and r.meets(comparison.slo_target)]
    if not meeting:
        _error(f"no policy met the SLO target ({reporting.percent(comparison.slo_target)}); nothing written to {path}")
        return EXIT_FAILED
    best = min(meeting, key=lambda r: r.gpu_hours)
    raw = deployable(document, best, comparison.model.cold_start_s)
    parse_policy_document(raw, path)  # what is written must load as it was simulated
    tuned = ", ".join(f"{k}={v}" for k, v in (best.tuned or {}).items())
    static = next((r for r in comparison.results if r.policy == "static-best"), None)
    header = [
        f"Written by `vllm-autoscaler simulate` for {comparison.workload.key}: {best.policy}"
        + (f" (tuned: {tuned})" if tuned else ""),
        f"met the SLO (time to first token beyond own prefill <= {comparison.slo_ttft:g} s for "
        f"{reporting.percent(comparison.slo_target)} of requests) at {floor_to(best.slo_attainment, 4):.4f} "
        f"for {best.gpu_hours:.2f} GPU-h",
        f"on {data['trace']} ({data['requests']} requests over {data['duration_s'] / 3600:.2f} h), with a "
        f"simulated cold start of {comparison.model.cold_start_s:g} s.",
    ]
    if static is not None and comparison.static_best_replicas:
        header.append(f"static-best: {static.gpu_hours:.2f} GPU-h ({comparison.static_best_replicas} replicas).")
    text = "".join(f"# {line}\n" for line in header) + yaml.safe_dump(raw, sort_keys=False, width=110)
    Path(path).write_text(text, encoding="utf-8")
    if static is not None and static.meets(comparison.slo_target) and static.gpu_hours < best.gpu_hours:
        print(
            f"vllm-autoscaler: note: {comparison.static_best_replicas} fixed replicas cost less "
            f"({static.gpu_hours:.2f} GPU-h against {best.gpu_hours:.2f}); {path} holds {best.policy}, the cheapest "
            "policy that met the SLO",
            file=sys.stderr,
        )
    print(f"vllm-autoscaler: wrote {best.policy} to {path}", file=sys.stderr)
    return EXIT_OK


def _settings(args: argparse.Namespace) -> Settings | None:
    """Settings from the environment, with this command's flags on top; ``None`` after reporting a bad one."""
    from pydantic import ValidationError

    from autoscaler.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        _error(f"bad VLLM_AUTOSCALER_* setting: {'.'.join(map(str, first['loc']))}: {first['msg']}")
        return None
    if getattr(args, "prometheus_url", None):
        settings.prometheus_url = args.prometheus_url
    if getattr(args, "kubeconfig", None):
        settings.kubeconfig = args.kubeconfig
    if getattr(args, "dry_run", False):
        settings.dry_run = True
    return settings


def _when(text: str) -> float:
    """Unix seconds, RFC 3339, ``now``, or ``now-2h``-style offsets."""
    from policies.recorded import parse_timestamp

    text = text.strip()
    if text.startswith("now"):
        rest = text[3:].strip()
        offset = 0 if not rest else parse_duration(rest.lstrip("-").strip())
        if rest and not rest.startswith("-"):
            raise ValueError(f"{text!r}: only offsets into the past, such as now-1h")
        return time.time() - float(offset)
    return parse_timestamp(text)


def cmd_record(args: argparse.Namespace) -> int:
    from autoscaler.logs import configure
    from autoscaler.metrics.prometheus import PrometheusSource
    from autoscaler.record import record

    document = _load(args.config)
    if document is None:
        return EXIT_BAD_INPUT
    settings = _settings(args)
    if settings is None:
        return EXIT_BAD_INPUT
    configure(settings.log_format, settings.log_level)
    try:
        start, end = _when(args.start), _when(args.end)
        step = float(parse_duration(args.step)) if args.step else float(document.interval)
        from autoscaler.metrics.queries import metric_queries

        for workload in document.workloads:
            metric_queries(workload)
    except ValueError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    if end <= start or step <= 0:
        _error("--end must be after --start, and --step positive")
        return EXIT_BAD_INPUT
    if problem := _unwritable(args.out):
        _error(problem)
        return EXIT_BAD_INPUT
    source = PrometheusSource(settings.prometheus(document))
    try:
        if args.out in (None, "-"):
            outcome = record(document, source, start, end, step, sys.stdout)
        else:
            with open(args.out, "w", newline="", encoding="utf-8") as handle:
                outcome = record(document, source, start, end, step, handle)
    except OSError as exc:
        return _write_failed(exc, args.out)
    for line in outcome.empty:
        print(f"vllm-autoscaler: no values: {line}", file=sys.stderr)
    if outcome.failed:
        for line in outcome.failed:
            _error(f"Prometheus failed: {line}")
        return EXIT_FAILED
    print(f"recorded {outcome.rows} rows", file=sys.stderr)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from autoscaler.daemon import run_daemon
    from autoscaler.logs import configure
    from autoscaler.metrics.queries import metric_queries

    settings = _settings(args)
    if settings is None:
        return EXIT_BAD_INPUT
    configure(settings.log_format, settings.log_level)
    document = _load(args.config, manifests=False)  # a reload reads the same path again, as a policy file
    if document is None:
        return EXIT_BAD_INPUT
    try:
        for workload in document.workloads:
            metric_queries(workload)
    except ValueError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    from kubernetes.config import ConfigException

    try:
        return run_daemon(args.config, document, settings, args.once)
    except ConfigException as exc:
        _error(f"no cluster to talk to: {exc} (run in a Pod, give --kubeconfig, or set KUBECONFIG)")
        return EXIT_FAILED
    except OSError as exc:  # the API server unreachable at start (a refused or dropped connection)
        _error(f"cannot reach the Kubernetes API: {str(exc).splitlines()[0][:200]}")
        return EXIT_FAILED


def _status_from_daemon(url: str) -> dict[str, Any] | None:
    """The records a running daemon serves at ``URL/status`` (any daemon: a dry-run one writes no state into the
    cluster); None, said in one line, when it cannot be read."""
    from urllib.error import URLError
    from urllib.request import urlopen

    from pydantic import ValidationError

    from autoscaler.state import WorkloadRecord

    address = url.rstrip("/") + "/status"
    try:
        with urlopen(address, timeout=10) as response:
            body = json.loads(response.read())
        return {f"{r.workload}": r for r in (WorkloadRecord.model_validate(w) for w in body["workloads"])}
    except (URLError, OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
        _error(
            f"cannot read {address}: {str(exc).splitlines()[0][:200]} (the daemon's --metrics-port, e.g. "
            "through kubectl port-forward)"
        )
        return None


def cmd_status(args: argparse.Namespace) -> int:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException

    from autoscaler.actuators.kubernetes import api_client
    from autoscaler.settings import own_namespace
    from autoscaler.state import STATE_CONFIGMAP, ConfigMapStateStore
    from autoscaler.status import as_json, table

    settings = _settings(args)
    if settings is None:
        return EXIT_BAD_INPUT
    if args.url is not None:
        if not args.url.startswith(("http://", "https://")):
            _error(f"--url: {args.url!r} is not an http(s) address")
            return EXIT_BAD_INPUT
        served = _status_from_daemon(args.url)
        if served is None:
            return EXIT_FAILED
        records = served
    else:
        if args.namespace is None:
            args.namespace = own_namespace(settings)
        try:
            store = ConfigMapStateStore(api_client(args.kubeconfig), args.namespace)
            records = store.load()
        except ConfigException as exc:
            _error(f"no cluster to read: {exc} (give --kubeconfig, or set KUBECONFIG)")
            return EXIT_FAILED
        except ApiException as exc:
            _error(f"cannot read ConfigMap {args.namespace}/{STATE_CONFIGMAP}: {exc.status} {exc.reason}")
            return EXIT_FAILED
        except OSError as exc:
            _error(f"cannot reach the cluster: {str(exc).splitlines()[0][:200]}")
            return EXIT_FAILED
        if store.version is None:
            _error(
                f"no state in {args.namespace}/{STATE_CONFIGMAP}: no leader has written it yet (a dry-run "
                "controller writes nothing into the cluster: read it with --url http://ITS-ADDRESS:PORT)"
            )
            return EXIT_FAILED
    if args.config:
        document = _load(args.config)
        if document is None:
            return EXIT_BAD_INPUT
        records = {k: r for k, r in records.items() if r.workload in {w.key for w in document.workloads}}
    print(as_json(records) if args.output == "json" else table(records, wide=args.output == "wide"))
    return EXIT_OK


def cmd_import_keda(args: argparse.Namespace) -> int:
    from autoscaler.keda_import import KedaImportError, convert_text, merge
    from policies.policy_file import PolicyFileError

    try:
        text = sys.stdin.read() if args.scaledobject == "-" else Path(args.scaledobject).read_text(encoding="utf-8")
        conversion = merge(convert_text(text, args.as_is))
    except (OSError, UnicodeDecodeError) as exc:
        _error(f"{args.scaledobject}: cannot read: {exc}")
        return EXIT_BAD_INPUT
    except (KedaImportError, PolicyFileError) as exc:
        _error(f"{args.scaledobject}: {exc}")
        return EXIT_BAD_INPUT
    for warning in conversion.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(conversion.yaml(), end="")
    return EXIT_OK


def _common_flags(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        "--debug",
        dest="debug",
        action="store_true",
        default=default,
        help="show the traceback of an unexpected error",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="no notes and no progress on standard error"
    )


def _parented(common: argparse.ArgumentParser) -> type[argparse.ArgumentParser]:
    """A subcommand parser class that inherits ``common``'s flags."""

    class Subcommand(argparse.ArgumentParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["parents"] = [common, *kwargs.get("parents", [])]
            super().__init__(*args, **kwargs)

    return Subcommand


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-autoscaler",
        description="Autoscale vLLM Deployments on vLLM's own Prometheus metrics.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _common_flags(parser, default=False)
    # The same flags after the command too (`simulate ... -q`); SUPPRESS keeps a flag given before it.
    common = argparse.ArgumentParser(add_help=False)
    _common_flags(common, default=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_parented(common))

    p = sub.add_parser("validate", help="check a policy file; print each problem with its field path")
    p.add_argument("--config", metavar="FILE")
    p.add_argument("--print-schema", action="store_true", help="print the policy file's JSON Schema and exit")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("replay", help="open-loop replay of recorded metrics through the decision code")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--metrics", required=True, metavar="RECORDED.csv")
    p.add_argument("--out", metavar="DECISIONS.csv", help="default: standard output")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("-o", "--output", choices=["csv", "json"], default="csv", help="standard output's format")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("run", help="the controller daemon")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--dry-run", action="store_true", help="decide and log, never write to the cluster")
    p.add_argument("--once", action="store_true", help="one tick for every workload, then exit")
    p.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, else ~/.kube/config")
    p.add_argument("--prometheus-url", metavar="URL", help="overrides the file and the environment")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("record", help="range-query Prometheus into a recorded-metrics file for replay")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--start", required=True, metavar="T", help="Unix seconds, RFC 3339, or now-1h")
    p.add_argument("--end", required=True, metavar="T")
    p.add_argument("--step", metavar="S", help="seconds or a duration such as 15s (default: the interval)")
    p.add_argument("--out", required=True, metavar="RECORDED.csv")
    p.add_argument("--prometheus-url", metavar="URL", help="overrides the file and the environment")
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("simulate", help="closed-loop simulation of a vLLM fleet under a request trace")
    p.add_argument("--config", metavar="FILE", help="policy file (default: a built-in Llama-3-70B workload)")
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="request trace (default: a built-in synthetic day); without --config, the built-in targets are "
        "sized for its requests by a load test",
    )
    p.add_argument("--format", choices=["azure", "mooncake", "burstgpt", "rate", "synthetic"])
    p.add_argument("--out", metavar="REPORT.json")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("--tune", action="store_true", help="find each policy's cheapest setting that meets the SLO")
    p.add_argument(
        "--write-config",
        metavar="POLICY.yaml",
        help="write the policy file of the cheapest policy that met the SLO, with the setting it ran with "
        "(tuned, with --tune), for `run`; exit 1 and write nothing if none met it",
    )
    p.add_argument(
        "--record-metrics",
        metavar="RECORDED.csv",
        help="also write the simulated fleet's metrics under the workload's own policy, tick by tick, as "
        "`record` writes them (for `replay`)",
    )
    p.add_argument(
        "--time-scale",
        type=_finite,
        default=1.0,
        help="2 = replay twice as fast (its load then changes twice as fast against the cold start)",
    )
    p.add_argument(
        "--window",
        type=_window,
        metavar="START:END",
        help="simulate only the requests that arrive in this part of the trace, timed from its first request "
        "before --time-scale (7d:14d is its second week; :6h, 30d:)",
    )
    p.add_argument("--cold-start", type=_seconds, metavar="SECONDS", help="overrides coldStartSeconds (300, 5m)")
    p.add_argument(
        "--slo-ttft",
        type=_seconds,
        metavar="SECONDS",
        help="time to first token beyond the request's own prefill (default: the file's slo.ttftSeconds, else 2); "
        "without --config, a tighter SLO than 2 s for 99%% sizes the built-in targets by a load test",
    )
    p.add_argument(
        "--slo-target",
        type=_finite,
        metavar="FRACTION",
        help="share of requests (default: the file's slo.target, else 0.99)",
    )
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument(
        "--jobs", type=_jobs, metavar="N", help="worker processes for a long trace's runs (default: one per core)"
    )
    p.add_argument("--policy", action="append", metavar="TYPE", help="policy type to compare (repeatable)")
    p.add_argument(
        "--replica-file",
        metavar="replica.yaml",
        help="the replica `calibrate --out` fitted to your server (default: the built-in Llama-3-70B replica)",
    )
    p.add_argument(
        "--replica", action="append", default=[], metavar="KEY=VALUE", help="replica model parameter (over the file)"
    )
    p.add_argument("--rate-scale", type=_finite, default=1.0, help="multiply a rate file's rates")
    p.add_argument("--lengths-from", metavar="FILE", help="draw a rate file's request lengths from this trace")
    p.add_argument(
        "-o", "--output", choices=["table", "json"], default="table", help="json: the report, as --out writes it"
    )
    p.set_defaults(func=cmd_simulate)

    from autoscaler.cli import calibrate

    calibrate.add_parser(sub)

    p = sub.add_parser("status", help="each workload's counts, metrics, last scale and cold start, from the cluster")
    p.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, else ~/.kube/config")
    p.add_argument(
        "--namespace",
        help="the controller's namespace (default: the daemon's own, VLLM_AUTOSCALER_LEASE_NAMESPACE, else the "
        "pod's, else vllm-autoscaler)",
    )
    p.add_argument("--config", metavar="FILE", help="show only this policy file's workloads")
    p.add_argument(
        "--url",
        metavar="URL",
        help="read a running daemon's /status (its metrics port) instead of the cluster's state: a dry-run daemon "
        "writes no state",
    )
    p.add_argument("-o", "--output", choices=["table", "wide", "json"], default="table")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("import-keda", help="print the policy file equivalent to a KEDA ScaledObject")
    p.add_argument("scaledobject", metavar="SCALEDOBJECT.yaml", help="a file, or - for standard input")
    p.add_argument(
        "--as-is",
        action="store_true",
        help="keep KEDA's semantics, mistakes included (for a side-by-side shadow run); default: corrected",
    )
    p.set_defaults(func=cmd_import_keda)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code not in (0, None) else EXIT_OK
    from policies.registry import broken_plugins

    QUIET["on"] = bool(args.quiet)
    for name, error in broken_plugins().items():
        _error(f"warning: policy plug-in {name!r} failed to load, so type {name!r} is unavailable: {error}")
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if on_main_thread else None
    try:
        result: int = args.func(args)
    except KeyboardInterrupt:  # Ctrl-C during a long simulate, replay or record: no traceback
        _error("interrupted")
        return EXIT_INTERRUPTED
    except Terminated:
        _error("terminated")
        return EXIT_TERMINATED
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if args.debug:
            raise
        detail = str(exc).splitlines()[0][:300] if str(exc) else ""
        _error(f"internal error: {type(exc).__name__}: {detail} (--debug shows the traceback)")
        return EXIT_FAILED
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)
    return result
