"""Where the default ``predictive``'s misses fall on recorded days: after stretches with almost no request.

``python -m lab.miss_windows --report docs/results`` (some six minutes on two cores). For each recorded case of
``lab/decision_quality.py`` whose window holds such stretches (``simulations.runner.lulls``: half an hour or more
under 5 % of the trace's median minute; ServeGen's rate file records no client at all in 84 of its windows), the
default as ``simulate`` plans it for a file given only an SLO, planned on the case's own window and on the window
beside it (the report's third table), is run from the fleet the trace's busiest window needs, and its misses are
counted by minute: the share of them in the ``AFTER_MINUTES`` after each stretch ends, against the share of the
requests that arrive there. A fixed fleet does not scale in over a stretch; a follower meets the traffic that comes
back after it short for a cold start.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab.decision_quality import CASES, MORE_CASES, PLANNED_ON, case_request, planned_on, planned_window, target_of
from simulations.results import write_dated

AFTER_MINUTES = 20  # a cold start and a tick, and the queue they leave to drain


@dataclass(frozen=True)
class Counted:
    """One run: its attainment, its misses, and the share of them and of the requests in the minutes after a lull."""

    attainment: float
    misses: int
    after_share: float
    requests_after_share: float
    lulls: int


def counted(case: list[str], batch: int, elsewhere: bool) -> Counted:
    """The case's default run, planned on its own window or (``elsewhere``) on ``PLANNED_ON``'s."""
    from simulations.contenders import policy_contender
    from simulations.oracle import oracle_bound
    from simulations.request import resolve
    from simulations.runner import lulls, run

    request = case_request(case, batch)
    ttft, target = request.slo()
    model, trace, document, _ = resolve(request, ttft, target)
    if elsewhere:
        _, _, document, _ = resolve(case_request(planned_on(case), batch), ttft, target)
    workload = document.workloads[0]
    initial = max(1, oracle_bound(trace, model, 0, ttft, target).busiest_fleet)
    result = run(trace, model, policy_contender(document, workload, model), initial, ttft, by_minute=True)
    assert result.missed_by_minute is not None and result.arrived_by_minute is not None
    missed, arrived = np.asarray(result.missed_by_minute), np.asarray(result.arrived_by_minute)
    _, stretches = lulls(trace)
    share, requests_share = after_stretches(missed, arrived, stretches)
    return Counted(result.slo_attainment, int(missed.sum()), share, requests_share, len(stretches))


def after_stretches(missed: np.ndarray, arrived: np.ndarray, stretches: list[tuple[int, int]]) -> tuple[float, float]:
    """The share of the misses, and of the requests, in the ``AFTER_MINUTES`` from each stretch's end (by minute)."""
    after = np.zeros(len(missed), dtype=bool)
    for _, end in stretches:
        after[end : end + AFTER_MINUTES] = True
    share = float(missed[after].sum()) / max(float(missed.sum()), 1.0)
    return share, float(arrived[after].sum()) / max(float(arrived.sum()), 1.0)


def with_lulls() -> list[tuple[str, list[str], int]]:
    """The recorded cases whose window holds a stretch with almost no request."""
    from simulations.request import inputs
    from simulations.runner import lulls

    chosen = []
    for title, case, batch in (*CASES, *MORE_CASES):
        if "--window" not in case or case[case.index("--window") + 1] not in PLANNED_ON:
            continue
        _, trace = inputs(case_request(case, batch))
        if lulls(trace)[1]:
            chosen.append((title, case, batch))
    return chosen


def _row(job: tuple[str, list[str], int]) -> str:
    title, case, batch = job
    cells = []
    for elsewhere in (False, True):
        c = counted(case, batch, elsewhere)
        mark = "" if c.attainment >= target_of(case) else " (misses)"
        cells.append(
            f"{c.attainment:.4f}{mark}, {c.misses:,} | {c.after_share:.0%} (requests {c.requests_after_share:.1%})"
        )
    row = f"| {title} ({c.lulls}) | {cells[0]} | {planned_window(case)} | {cells[1]} |"
    print(row, file=sys.stderr)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, help="write a dated report into this directory")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    jobs = with_lulls()
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(_row, jobs))
    body = [
        "The recorded cases of `lab/decision_quality.py` whose window holds stretches of half an hour or more with "
        "almost no request (under 5 % of the trace's median minute: `simulations.runner.lulls`; ServeGen's rate file "
        "records no client at all in 84 of its 2,016 windows), the number of them after each title. The default "
        "`predictive`, untuned, given only an SLO, planned on the case's own window and on the one beside it (the "
        "decision-quality report's third table), run from the fleet the busiest window needs: its SLO attainment "
        f"and misses, and the share of its misses in the {AFTER_MINUTES} minutes after each stretch ends, beside the "
        "share of the requests that arrive there.",
        "",
        "| traffic (stretches) | own window: attainment, misses | after a stretch | planned on | attainment, misses | "
        "after a stretch |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    print("\n".join(body))
    if args.report is not None:
        command = "python -m lab.miss_windows --report docs/results"
        title = "Where the default's misses fall on recorded days"
        path = write_dated(args.report, "miss-windows", title, command, body)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
