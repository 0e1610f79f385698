"""Whether a starting daemon may read the error budget's day coarser than a minute apart: the default
``predictive``'s count and learned utilization after each recorded multi-day case of ``lab/decision_quality.py``,
ticked live every interval, against the same ticks passed through ``catch_up`` one in ``k`` (what
``autoscaler.warm_up`` does before ``detail_seconds``, ``coarse_intervals`` ticks apart); written to
``docs/results/DATE-warm-up-step.md``.

    python -m lab.warm_up_step [--report docs/results]

The signals a tick reads are the last minute's rates, so one in four 15 s ticks covers the day once; coarser, a
minute stands for several and a surge's minutes are seen or missed whole.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from autoscaler.cli import build_parser
from autoscaler.cli.simulate import simulation_request
from lab.decision_quality import CASES
from policies.base import Observation
from policies.predictive import PredictivePolicy
from simulations.contenders import policy_contender
from simulations.request import resolve
from simulations.results import write_dated
from simulations.runner import run

EVERY = (4, 8, 20, 40)  # ticks of 15 s: a minute, two, five and ten minutes apart
DAYS = [case for case in CASES if "days" in case[0]]


def _policy(contender: Any) -> PredictivePolicy:
    policy = contender.decider.policy
    assert isinstance(policy, PredictivePolicy) and policy.follows
    return policy


def measure(case: tuple[str, list[str], int]) -> tuple[str, list[str]]:
    """One case's row: the live count and utilization at the end of its run, and each coarser replay's."""
    title, arguments, batch = case
    args = build_parser().parse_args(["simulate", *arguments, "--replica", f"max_num_seqs={batch}"])
    request = simulation_request(args, None)
    slo_ttft, slo_target = request.slo()
    model, trace, document, _ = resolve(request, slo_ttft, slo_target)
    workload = document.workloads[0]
    live = policy_contender(document, workload, model)
    live.observed = []
    run(trace, model, live, workload.max_replicas, slo_ttft, False)  # from a fleet that suffices: none is wanted
    ticks = [Observation(now, spec, metrics, ready) for now, spec, ready, metrics in live.observed]
    policy = _policy(live)
    assert policy.state.budget is not None and policy.state.utilization is not None
    misses, utilization = policy.state.budget.misses, policy.state.utilization.utilization
    cells = [f"{misses:,.0f} / {utilization:.3f}"]
    default = PredictivePolicy.coarse_intervals
    for k in EVERY:
        replayed = _policy(policy_contender(document, workload, model))
        PredictivePolicy.coarse_intervals = k  # the warm-up's step and the count's cap move together
        try:
            for tick in ticks[k - 1 :: k]:
                replayed.catch_up(tick)
        finally:  # a worker's next case runs live with the policy's own cap
            PredictivePolicy.coarse_intervals = default
        assert replayed.state.budget is not None and replayed.state.utilization is not None
        counted, learned = replayed.state.budget.misses, replayed.state.utilization.utilization
        cells.append(f"{counted / misses - 1:+.0%} / {learned / utilization - 1:+.1%}")
    return title, cells


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.warm_up_step", description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, metavar="DIR", help="write a dated Markdown report there")
    args = parser.parse_args()
    with ProcessPoolExecutor(2) as pool:
        rows = [f"| {title} | {' | '.join(cells)} |" for title, cells in pool.map(measure, DAYS)]
    steps = " | ".join(f"every {k} ticks ({k * 15 / 60:g} min)" for k in EVERY)
    body = [
        "The default `predictive`, untuned, given only an SLO (2 s for 99 %), on the recorded multi-day cases of",
        "`lab/decision_quality.py`: the misses its error budget counted over the last day and the utilization it",
        "learned, ticked live every 15 s; then the same ticks passed through `catch_up` one in k, each counting k",
        "intervals of first tokens, as a starting daemon reads the part of its history older than `detail_seconds`:",
        "the count and the utilization against the live ones.",
        "",
        f"| case | live: misses / utilization | {steps} |",
        "|---|---|" + "---|" * len(EVERY),
        *rows,
    ]
    print("\n".join(body))
    if args.report:
        path = write_dated(args.report, "warm-up-step", "The warm-up's step", "python -m lab.warm_up_step", body)
        print(f"python -m lab.warm_up_step: wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
