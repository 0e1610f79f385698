"""Whether a fleet's SLO misses can be counted from what vLLM exports: ``python -m lab.miss_estimate``
(from the repository root).

Issue 36 asks the policy to spend the SLO's error budget on purpose, which needs the misses counted as the SLO
judges them: time to first token beyond the request's own prefill. The TTFT histogram's buckets cannot (its
quantiles read the long prompts' own prefill as misses; docs/decisions/capacity-learner.md); its ``_sum`` and
``_count`` with the prompt-token counter give each minute's mean beyond prefill,
and ``policies.predictive.budget.miss_share`` turns that into a share of the minute's first tokens.

Each case runs the built-in workload on a matrix scenario (sized and started as ``lab.matrix`` does,
from its ``--cache``) with a lowered headroom, so that minutes of every load occur. At the end of every minute
the estimate is read from the scrapes of that minute, as a policy would read it, and set beside the requests
whose first token came between the same two scrapes, judged as ``simulate`` judges them. The idle prefill
speed is the replica model's (``ReplicaModel.idle_prefill_tokens_per_s``). The cases' first group is the
one the estimate's three constants were chosen on, the second one they were not; the third runs the default as
it is, learned headroom and budget, where what the count reads decides how much headroom is handed back.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import sys
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from lab.matrix import CACHE, Scenario, cached_baseline, scenario_model, scenarios
from policies.policy_file import parse_policy_document
from policies.predictive import PredictiveParams, prompt_spread
from policies.predictive.budget import PROMPT_LENGTH_SIGMA, mean_beyond_prefill, miss_share, prefill_tail
from simulations.contenders import policy_contender, policy_variant
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel
from simulations.results import write_dated
from simulations.runner import run, slo_met
from simulations.traces import Trace

FAST = ("prefill_tokens_per_s=2500",)  # a replica that prefills 2.5 times the built-in one's speed


@dataclass(frozen=True)
class Case:
    """A matrix scenario run at ``headroom`` (low, so that its minutes span light to overloaded; ``None``: the
    built-in workload's own, learned headroom and budget as the default runs them), judged at ``slo`` seconds (its
    own where ``None``), on the replica with ``replica``'s overrides."""

    which: str
    scenario: str
    headroom: float | None
    slo: float | None = None
    replica: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        slo = "" if self.slo is None else f" judged at {self.slo:g} s"
        return f"{self.scenario}{', fast replica' if self.replica else ''}{slo}"


CHOSEN_ON = (
    Case("short", "day0@300", 0.2),
    Case("short", "day0@120,slo1s", 0.2),
    Case("short", "azure@300", 0.0),
    Case("short", "flat@300", 0.0),
    Case("recorded", "servegen11@300", 0.2),
    Case("bursty", "diurnal@300", 0.2),
    Case("short", "day5@120", 0.2),
    Case("short", "azure@60", 0.0),
    Case("recorded", "servegen3@60", 0.0),
    Case("bursty", "bursty3@300", 0.2),
    Case("tight", "servegen11@120,slo1s", 0.2),
    Case("tight", "servegen11@120,slo1s", 0.0),
)
"""The runs ``policies.predictive.budget.miss_share``'s three constants were chosen on."""
HELD_OUT = (
    Case("recorded", "servegen3@60", 0.0, slo=1.5),
    Case("recorded", "servegen3@60", 0.0, slo=3.0),
    Case("short", "day0@120", 0.2, slo=1.5),
    Case("short", "day5@120", 0.0, slo=3.0),
    Case("recorded", "servegen5@60", 0.2, slo=1.0),
    Case("recorded", "servegen7@60", 0.2, slo=1.0),
    Case("short", "azure@120", 0.2, slo=1.0),
    Case("recorded", "servegen3@60", 0.2, slo=0.5, replica=FAST),
    Case("recorded", "servegen3@60", 0.0, slo=1.0, replica=FAST),
    Case("recorded", "servegen9@60", 0.0, slo=2.0, replica=FAST),
)
"""Runs they were not chosen on: other SLOs, other days, a faster replica."""
UNDER_DEFAULT = (
    Case("recorded", "servegen3@300", None),
    Case("recorded", "servegen5@300", None),
    Case("recorded", "servegen7@60", None),
    Case("recorded", "servegen11@300", None),
    Case("bursty", "diurnal@300", None),
    Case("bursty", "bursty11@60", None),
    Case("short", "azure@300", None),
    Case("short", "flat@300", None),
    Case("short", "day0@300", None),
    Case("short", "day5@120", None),
    Case("tight", "servegen11@120,slo1s", None),
)
"""Runs of the default itself, where its budget is spent: calm ones count their misses high, and what the budget
reads there is what hands the headroom back (docs/decisions/error-budget-count.md)."""
BINS = (0.1, 0.2, 0.3, 0.5, 1.0, 2.0)  # seconds of mean beyond prefill, the table's rows' upper edges


@dataclass(frozen=True)
class Minute:
    """One minute between two scrapes: the estimate a policy reads, and what the SLO judged."""

    mean_beyond: float
    estimated_misses: float
    first_tokens: int
    misses: int


Counters = tuple[float, float, float, float, float]
"""A minute's first and last scrape times, and the increases of the TTFT histogram's sum and count and of the
prompt-token counter between them."""


def minute_counters(fleet: Fleet, now: float) -> Counters | None:
    """The counters of the minute that ends at ``now``, as ``rate(...[1m])`` reads them; ``None`` before two
    scrapes."""
    if (pair := fleet.window(now)) is None:
        return None
    first, last = pair
    return (
        first.at,
        last.at,
        last.ttft_sum - first.ttft_sum,
        last.ttft_count - first.ttft_count,
        last.prompt_tokens_total - first.prompt_tokens_total,
    )


def read_minutes(
    fleet: Fleet, counted: list[Counters], slo_ttft: float, prefill_tokens_per_second: float, sigma: float
) -> list[Minute]:
    """For each minute of ``counted``, the estimate from the counters' increases (as ``predictive`` makes it,
    its prompts' lengths spread by ``sigma``), and the judged misses among the first tokens between its two
    scrapes (the same requests the increases count)."""
    met = slo_met(fleet, slo_ttft)
    minutes = []
    for start, end, ttft, count, prompt in counted:
        mean = mean_beyond_prefill(ttft, count, prompt, prefill_tokens_per_second)
        if mean is None:
            continue
        tail = prefill_tail(slo_ttft, prompt / count / prefill_tokens_per_second, sigma)
        estimate = count * miss_share(mean, slo_ttft, tail)
        inside = (fleet.first_token > start) & (fleet.first_token <= end)
        minutes.append(Minute(mean, estimate, int(inside.sum()), int((~met[inside]).sum())))
    return minutes


def measure(
    trace: Trace,
    model: ReplicaModel,
    raw_document: dict[str, Any],
    initial: int,
    slo_ttft: float,
    headroom: float | None,
) -> tuple[list[Minute], float]:
    """Run the document's workload at ``headroom`` (without a learned one; ``None``: as the document has it) and read
    every minute's estimate; also the run's attainment."""
    document = parse_policy_document(raw_document, "<miss-estimate>")
    workload = document.workloads[0]
    doc, variant = document, workload
    if headroom is not None:
        # The headroom as given, not learned: the built-in's learned one would hold the fleet from the loads to span.
        fixed = {
            key: value
            for key, value in workload.policy.items()
            if key not in ("learnedHeadroom", "utilization", "errorBudget")
        }
        doc, variant = policy_variant(document, workload, {**fixed, "headroom": headroom})
    contender = policy_contender(doc, variant, model)
    signals = contender.signals
    assert signals is not None
    counted: list[Counters] = []
    fleets: list[Fleet] = []

    def reading(fleet: Fleet, now: float) -> dict[str, float | None]:
        if not fleets:
            fleets.append(fleet)
        if now % 60 == 0 and (minute := minute_counters(fleet, now)) is not None:
            counted.append(minute)
        return signals(fleet, now)

    result = run(trace, model, replace(contender, signals=reading), initial, slo_ttft, timeline=False)
    sigma = budget_spread(workload.policy)
    return read_minutes(fleets[0], counted, slo_ttft, model.idle_prefill_tokens_per_s, sigma), result.slo_attainment


def budget_spread(policy: dict[str, Any]) -> float:
    """The prompts' spread a predictive block's budget counts by with no prompt-length histogram to read
    (``predictive.prompt_spread``): the one it is told, which ``sized_builtin`` writes for every case."""
    budget = PredictiveParams.model_validate(policy).error_budget
    return prompt_spread(budget) if budget is not None else PROMPT_LENGTH_SIGMA


def table(minutes: list[Minute]) -> list[str]:
    """The minutes by their estimated mean beyond prefill: the share of first tokens that missed, judged and
    estimated."""
    lines = ["| mean beyond prefill (s) | minutes | first tokens | missed | estimated |", "|---|---|---|---|---|"]
    edges = (-np.inf, *BINS, np.inf)
    for low, high in itertools.pairwise(edges):
        inside = [m for m in minutes if low < m.mean_beyond <= high]
        tokens = sum(m.first_tokens for m in inside)
        if not tokens:
            continue
        label = f"up to {high:g}" if low == -np.inf else (f"over {low:g}" if high == np.inf else f"{low:g} to {high:g}")
        missed = sum(m.misses for m in inside) / tokens
        estimated = sum(m.estimated_misses for m in inside) / tokens
        lines.append(f"| {label} | {len(inside)} | {tokens:,} | {missed:.2%} | {estimated:.2%} |")
    return lines


def _scenario(which: str, name: str) -> Scenario:
    return next(s for s in scenarios(which) if s.name == name)


@dataclass(frozen=True)
class Measured:
    case: Case
    slo: float
    target: float
    minutes: list[Minute]
    attainment: float

    @property
    def first_tokens(self) -> int:
        return sum(m.first_tokens for m in self.minutes)

    @property
    def judged(self) -> int:
        return sum(m.misses for m in self.minutes)

    @property
    def estimated(self) -> float:
        return sum(m.estimated_misses for m in self.minutes)

    @property
    def budget_error(self) -> float:
        """The count's error in the run's budgets: what it adds to, or takes from, ``budgetUsed``."""
        return (self.estimated - self.judged) / max((1.0 - self.target) * self.first_tokens, 1.0)


def measure_case(case: Case, cache: Path = CACHE) -> Measured:
    """``case`` run from the matrix's ``cache`` of sized scenarios (sized there first where it has none)."""
    scenario = replace(_scenario(case.which, case.scenario), replica=case.replica)
    trace, model = scenario.trace(), scenario_model(scenario)
    baseline = cached_baseline(scenario, trace, model, cache)
    slo = scenario.slo_ttft if case.slo is None else case.slo
    minutes, attainment = measure(trace, model, baseline.document, baseline.initial, slo, case.headroom)
    return Measured(case, slo, scenario.slo_target, minutes, attainment)


def _headroom(case: Case) -> str:
    return "default" if case.headroom is None else f"{case.headroom:g}"


def summary(measured: list[Measured]) -> list[str]:
    lines = [
        "| case | headroom | SLO (s) | attainment | judged misses | estimated | estimated / judged | error, budgets |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in measured:
        ratio = f"{m.estimated / m.judged:.2f}" if m.judged else "-"
        lines.append(
            f"| {m.case.label} | {_headroom(m.case)} | {m.slo:g} | {m.attainment:.4f} | {m.judged:,} | "
            f"{m.estimated:,.0f} | {ratio} | {m.budget_error:+.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.miss_estimate", description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=CACHE, help="the matrix's cache of sized scenarios")
    parser.add_argument("--report", type=Path, metavar="DIR", help="also write a dated Markdown report there")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once, one process each")
    args = parser.parse_args(argv)
    cases = [*CHOSEN_ON, *HELD_OUT, *UNDER_DEFAULT]
    if args.jobs > 1:
        with mp.get_context("fork").Pool(args.jobs) as pool:
            measured = pool.map(partial(measure_case, cache=args.cache), cases, chunksize=1)
    else:
        measured = [measure_case(case, args.cache) for case in cases]
    body = ["Chosen on:", "", *summary(measured[: len(CHOSEN_ON)]), ""]
    body += [
        "Held out: runs the estimate's constants were not chosen on.",
        "",
        *summary(measured[len(CHOSEN_ON) : len(CHOSEN_ON) + len(HELD_OUT)]),
        "",
        "Under the default: the built-in workload's own learned headroom and budget, where what the count reads hands "
        "the headroom back.",
        "",
        *summary(measured[len(CHOSEN_ON) + len(HELD_OUT) :]),
        "",
    ]
    for m in measured:
        body += [
            f"**{m.case.label}**, headroom {_headroom(m.case)} (SLO {m.slo:g} s): "
            f"{m.first_tokens:,} first tokens, {m.judged:,} judged misses, "
            f"{m.estimated:,.0f} estimated (attainment {m.attainment:.4f}).",
            "",
            *table(m.minutes),
            "",
        ]
    print("\n".join(body), flush=True)
    if args.report:
        given = sys.argv[1:] if argv is None else argv
        command = " ".join(["python -m lab.miss_estimate", *given])
        intro = [
            "Each case: the built-in workload's `predictive` at the headroom given (`default`: its own, learned "
            "and handed back as the budget burns), on a matrix scenario, judged at "
            "its SLO or the one given, on the built-in replica or the fast one (`prefill_tokens_per_s=2500`). A "
            "row of a case's table gathers the minutes whose estimated mean time to first token beyond own "
            "prefill falls in its range; `missed` is the share of their first tokens the SLO judged late, "
            "`estimated` what `policies.predictive.budget.miss_share` made of each minute's histogram sum and "
            "count and of the prompts' spread the budget is told, the trace's (the module's docstring says how). "
            "`error, budgets` is the count's error in units of the run's error budget: what it adds to "
            "`budgetUsed`. A minute counts the first tokens between its first and last scrape, 45 s of it at the "
            "replicas' 15 s scrape interval, as `rate(...[1m])` does; so the first tokens are about three quarters "
            "of the run's requests.",
            "",
        ]
        title = "SLO misses counted from the histogram"
        written = write_dated(args.report, "miss-estimate", title, command, [*intro, *body])
        print(f"wrote {written}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
