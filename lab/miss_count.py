"""How the error budget's count of SLO misses compares with the misses the SLO judged, under the default, on the
decision-quality cases: ``python -m lab.miss_count [--date YYYY-MM-DD] [--jobs N]``, written to
``docs/results/DATE-miss-count.md``.

Each case is run as ``lab/decision_quality.py`` runs it (``simulate``'s built-in workload given only an SLO, the
default ``predictive`` as it sizes it), and at the end of every minute the count is read from the scrapes of that
minute, as the policy reads it, three ways: from the TTFT histogram's mean beyond the prompts' prefill at the idle
prefill speed alone (as the count stood before), less the replica's request overhead as well, and bounded as well by
the first tokens above the histogram's bucket edge at or below the SLO (``policies.predictive.budget``: the count
the default makes). Beside them, the first tokens between the same two scrapes that the SLO judged late. The error
is in the run's budgets: what the count adds to, or takes from, ``budgetUsed``. Two cases are judged at a 1 s SLO
as well, where the light minutes' misses behind long prompts matter most.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from autoscaler.cli import build_parser
from autoscaler.cli.simulate import simulation_request
from lab.decision_quality import CASES
from lab.miss_estimate import minute_counters
from policies.predictive import prompt_spread
from policies.predictive.budget import mean_beyond_prefill, miss_share, over_slo_share, prefill_tail
from policies.predictive.params import PredictiveParams
from simulations.compare import footing
from simulations.contenders import policy_contender
from simulations.fleet import Fleet
from simulations.request import resolve
from simulations.runner import run, slo_met

ROOT = Path(__file__).resolve().parents[1]
TIGHT = ((2, 1.0), (6, 1.0))  # cases judged at a tighter SLO too: (index in CASES, seconds)
WAYS = ("mean alone", "less the overhead", "and bounded")


@dataclass(frozen=True)
class Counted:
    """One case's run: its first tokens, the misses judged among them, and each way's count."""

    title: str
    slo: float
    target: float
    attainment: float
    first_tokens: float
    judged: float
    counted: tuple[float, ...]  # each of WAYS

    def error(self, way: int) -> float:
        """The way's count less the judged misses, in the run's budgets."""
        return (self.counted[way] - self.judged) / ((1 - self.target) * self.first_tokens)


def measure(job: tuple[int, float | None]) -> Counted:
    """Run case ``job[0]`` (at SLO ``job[1]`` seconds, the default's 2 s where None) and count every minute."""
    index, seconds = job
    title, case, batch = CASES[index]
    args = [*case, "--replica", f"max_num_seqs={batch}", *(["--slo-ttft", str(seconds)] if seconds else [])]
    request = simulation_request(build_parser().parse_args(["simulate", *args]), None)
    slo, target = request.slo()
    model, trace, document, _ = resolve(request, slo, target)
    workload = document.workloads[0]
    budget = PredictiveParams.model_validate(workload.policy).error_budget
    assert budget is not None
    base = footing(trace, model, document, workload, slo, target, workers=1)
    contender = policy_contender(document, workload, model)
    signals = contender.signals
    assert signals is not None
    minutes: list[tuple[float, float, float, float, float, float]] = []
    fleets: list[Fleet] = []

    def reading(fleet: Fleet, now: float) -> dict[str, float | None]:
        if not fleets:
            fleets.append(fleet)
        if now % 60 == 0 and (counters := minute_counters(fleet, now)) is not None:
            start, end = counters[0], counters[1]
            minutes.append((*counters, (fleet.first_tokens_over(slo, now) or 0.0) * (end - start)))
        return signals(fleet, now)

    result = run(trace, model, replace(contender, signals=reading), base.initial, slo, timeline=False)
    fleet = fleets[0]
    met = slo_met(fleet, slo)
    speed, overhead, sigma = budget.prefill_tokens_per_second, budget.request_overhead_seconds, prompt_spread(budget)
    counted, firsts, judged = np.zeros(3), 0.0, 0.0
    for start, end, ttft, count, prompt, over in minutes:
        plain = mean_beyond_prefill(ttft, count, prompt, speed)
        if plain is None:
            continue
        tail = prefill_tail(slo, prompt / count / speed, sigma)
        shares = (miss_share(plain, slo, tail), miss_share(plain - overhead, slo, tail))
        counted += count * np.array([*shares, min(shares[1], over_slo_share(over, count))])
        inside = (fleet.first_token > start) & (fleet.first_token <= end)
        firsts += float(count)
        judged += float((~met[inside]).sum())
    title = title if seconds is None else f"{title}, judged at {seconds:g} s"
    return Counted(title, slo, target, result.slo_attainment, firsts, judged, tuple(counted.tolist()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once, one process each")
    args = parser.parse_args()
    jobs: list[tuple[int, float | None]] = [(i, None) for i in range(len(CASES))] + list(TIGHT)
    with mp.get_context("fork").Pool(args.jobs) as pool:
        done = pool.map(measure, jobs, chunksize=1)
    rows = []
    for c in done:
        errors = " | ".join(f"{c.counted[w]:,.0f} ({c.error(w):+.2f})" for w in range(len(WAYS)))
        rows.append(f"| {c.title} | {c.attainment:.4f} | {c.first_tokens:,.0f} | {c.judged:,.0f} | {errors} |")
    worst = [max(c.error(w) for c in done) for w in range(len(WAYS))]
    least = [min(c.error(w) for c in done) for w in range(len(WAYS))]
    text = f"""# The error budget's count of SLO misses against the judged misses, under the default ({args.date})

Written by `python -m lab.miss_count`: each decision-quality case run as `python lab/decision_quality.py` runs it
(the default `predictive`, untuned, given only an SLO of 2 s for 99 % unless the row says), on the replica whose
engine runs whole steps. Every minute the count is read from the scrapes of that minute, as the policy reads it:
from the TTFT histogram's mean beyond the prompts' prefill at the idle prefill speed alone (the count before), less
the replica's request overhead too (`requestOverheadSeconds`), and bounded too by the first tokens above the
histogram's bucket edge at or below the SLO (the count the default makes). `judged`: the first tokens between the
same two scrapes that the SLO judged late. In brackets, the count's error in the run's budgets (what it adds to
`budgetUsed`). The runs are the default's own, so the count it made steered them.

| case | attainment | first tokens | judged misses | {" | ".join(WAYS)} |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

The count's error, in budgets, from {least[0]:+.2f} to {worst[0]:+.2f} by the mean alone, {least[1]:+.2f} to
{worst[1]:+.2f} less the overhead, {least[2]:+.2f} to {worst[2]:+.2f} bounded as well.
"""
    out = ROOT / "docs" / "results" / f"{args.date}-miss-count.md"
    out.write_text(text)
    print(text)
    print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
