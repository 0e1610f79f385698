"""``vllm-autoscaler calibrate``: fit the simulated replica to ``vllm bench serve --save-result`` files, or score
a replica file against them (``--check``). It parses, calls ``simulations.calibration`` and prints."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from autoscaler.cli.common import EXIT_BAD_INPUT, EXIT_OK, _error, _write_failed

if TYPE_CHECKING:
    from simulations.replica_model import ReplicaModel


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit the simulated replica to vllm bench serve results; print measured beside simulated",
    )
    p.add_argument("results", nargs="+", metavar="RESULT.json", help="vllm bench serve --save-result files")
    p.add_argument("--out", metavar="replica.yaml", help="write the fitted replica file (for simulate --replica-file)")
    p.add_argument("--replica-file", metavar="replica.yaml", help="with --check: the replica to score")
    p.add_argument("--check", action="store_true", help="score the files against --replica-file without refitting")
    p.add_argument("--kv-cache-tokens", type=int, metavar="N", help="the server's KV cache, in tokens")
    p.add_argument("--server-log", metavar="FILE", help="read the KV cache's size from vLLM's start-up log")
    p.add_argument("--max-num-seqs", type=int, default=256, help="the server's --max-num-seqs (256)")
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=2048,
        help="the server's token budget a step (its log: 'Chunked prefill is enabled with max_num_batched_tokens')",
    )
    p.add_argument("--block-size", type=int, default=16, help="the server's --block-size (16)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs a replica holds, for GPU-hours (1)")
    p.add_argument("--name", default="calibrated vLLM replica", help="the replica file's name field")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    import yaml

    from simulations.calibration import CalibrationError, compare_rows, load_run, replica_file_data

    try:
        runs = [(path, load_run(path)) for path in args.results]
        replica = _replica(args, runs)
        if isinstance(replica, int):
            return replica
        model, warnings = replica
        rows = compare_rows(model, runs)
    except CalibrationError as exc:
        _error(str(exc))
        return EXIT_BAD_INPUT
    except ValueError as exc:  # a flag the replica model refuses (a batch of 0, say)
        _error(str(exc).splitlines()[0])
        return EXIT_BAD_INPUT
    for warning in warnings:
        _error(f"warning: {warning}")
    if args.output == "json":
        print(json.dumps({"replica": replica_file_data(model), "rows": rows}, indent=2))
    else:
        print(table(rows))
        print(
            f"\nreplica: prefill {model.prefill_tokens_per_s:,.0f} tokens/s, decode {model.decode_tokens_per_s:.1f} "
            f"tokens/s alone, KV read {model.kv_read_s_per_token * 1e9:.1f} ns a token, overhead "
            f"{model.request_overhead_s * 1e3:.0f} ms, KV cache {model.kv_cache_tokens:,.0f} tokens"
        )
    if args.out and not args.check:
        try:
            with open(args.out, "w", encoding="utf-8") as handle:
                yaml.safe_dump(replica_file_data(model), handle, sort_keys=False)
        except OSError as exc:
            return _write_failed(exc, args.out)
    return EXIT_OK


def _replica(args: argparse.Namespace, runs: list[tuple[str, Any]]) -> tuple[ReplicaModel, list[str]] | int:
    """The replica to score: the file given with ``--check``, else the one fitted to the runs (with the fit's
    warnings); an exit status, said in one line, for flags that cannot give one."""
    from simulations.calibration import fit, kv_tokens_from_log, load_replica_file
    from simulations.replica_model import ReplicaModel

    if args.check:
        if not args.replica_file:
            _error("--check scores a replica file: give --replica-file replica.yaml")
            return EXIT_BAD_INPUT
        return load_replica_file(args.replica_file), []
    if args.replica_file:
        _error("--replica-file is for --check; to fit, leave it out")
        return EXIT_BAD_INPUT
    kv = args.kv_cache_tokens
    if kv is None and args.server_log:
        kv = kv_tokens_from_log(args.server_log)
    if kv is None or kv <= 0:
        _error("give the KV cache's size: --kv-cache-tokens N, or --server-log FILE (vLLM's start-up log)")
        return EXIT_BAD_INPUT
    base = ReplicaModel(
        name=args.name,
        kv_cache_tokens=kv,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_block_tokens=args.block_size,
        gpus_per_replica=args.gpus,
    )
    fitted = fit(runs, base)
    return fitted.model, fitted.warnings


COLUMNS = (
    ("request_throughput", "req/s", "{:.3g}"),
    ("output_throughput", "out tok/s", "{:.0f}"),
    ("mean_ttft_ms", "TTFT mean", "{:.0f}"),
    ("median_ttft_ms", "TTFT p50", "{:.0f}"),
    ("p99_ttft_ms", "TTFT p99", "{:.0f}"),
    ("mean_tpot_ms", "TPOT mean", "{:.1f}"),
    ("median_tpot_ms", "TPOT p50", "{:.1f}"),
)


def table(rows: list[dict[str, Any]]) -> str:
    """One line a file: each figure measured / simulated (simulated over measured), times in ms."""
    header = ["file", *(title for _, title, _ in COLUMNS)]
    lines = [header]
    for row in rows:
        cells = [str(row["file"])]
        for key, _, form in COLUMNS:
            measured, simulated = row["measured"][key], row["simulated"][key]
            ratio = simulated / measured if measured else float("nan")
            cells.append(f"{form.format(measured)}/{form.format(simulated)} ({ratio:.2f})")
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines)
