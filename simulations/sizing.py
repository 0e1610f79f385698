"""How much of the built-in workload's targets a replica takes for the trace's requests and the user's
SLO, found as a user would find it: a load test of a few replicas under steady traffic of those requests.

The built-in targets (``builtin.builtin_document``) are sized for requests of the built-in length
distribution under an SLO of 2 s on time to first token beyond a request's own prefill. Other requests
sustain other rates (``builtin_shares``). A tighter SLO leaves less room for queueing, by how much
depends on everything that delays a first token: the prompts' lengths, the prefill throughput, the
decode batch that shares each engine step. No formula in one of them fits (measured, docs/simulation.md:
scaling the targets with the SLO alone over-provisioned fast GPUs and short prompts; with the SLO over the
mean prompt's prefill, missed the SLO where big decode batches slow the engine). So the replica model itself
is asked: the load ``LOAD_TEST_REPLICAS`` fixed replicas carry within the user's SLO and within the
reference one, on the same arrivals scaled in time (common random numbers). Predictive's start and floor are
load-tested the same way, at the fleet the trace needs, and planned over the trace (``follower_plan``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from policies.predictive.utilization import AIM
from policies.spec import DEFAULT_SCALE_DOWN
from simulations.follower_plan import (
    LEAST,
    LOADS,
    MissCurve,
    Plan,
    burstiness,
    fixed_candidates,
    fluid_fleet,
    held_work,
    plan,
)
from simulations.oracle import oracle_bound
from simulations.replica_model import ReplicaModel
from simulations.runner import Contender, RunResult, allowed_misses, run
from simulations.traces import PrefixBlocks, Trace, sample_lengths

REFERENCE_SLO_TTFT_S = 2.0  # the built-in targets are sized for this SLO
REFERENCE_SLO_TARGET = 0.99
LOAD_TEST_REPLICAS = 8  # the targets' tests; the start's first one, then the trace's own fleet
START_TESTS = 3  # the start's load tests at most: each at the fleet the one before found the trace needs
DEFAULT_HOLD_S = float(DEFAULT_SCALE_DOWN.stabilization_window_seconds or 0)  # the HPA's scale-down window
LOAD_TEST_S = 3600.0
LOAD_TEST_MOST_REQUESTS = 200_000  # at its highest rate: a test of tiny requests is shortened to it
LOAD_TEST_STEPS = 8  # to 0.4 % of the bound
TIGHTER_STEPS = 6  # the tighter SLO's search, below the reference's rate: to 1.6 % of it
LEAST_SHARE = 0.1
# Samples of the built-in length distribution itself (the built-in day's, seeds 0-3; the two-day trace's)
# sustain 0.955 to 0.998 of its rate: a difference within this is the test's, not the requests'.
MIX_SPREAD = 0.94
MOST_MIX_RATIO = 2.0
# What the load test depends on: a replica that differs from the built-in one only elsewhere (its cold
# start, the scrape) serves the same load under the same SLO, and one with at least as much of each
# capacity (and the same routing, caching and step) at least as much.
CAPACITY_FIELDS = (
    "max_num_seqs",
    "kv_cache_tokens",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "max_num_batched_tokens",
)
SERVING_MODE_FIELDS = ("routing", "prefix_caching", "step_s")
SERVING_FIELDS = (*CAPACITY_FIELDS, *SERVING_MODE_FIELDS)


def request_lengths(trace: Trace | None, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The prompt and output lengths a load test draws from: the trace's, or 10,000 of the built-in distribution."""
    return (trace.prompt_tokens, trace.output_tokens) if trace is not None else sample_lengths(rng, 10_000)


@dataclass(frozen=True)
class LoadTest:
    """Steady Poisson arrivals of a trace's requests for a fleet of fixed replicas over
    ``span`` seconds, at any rate up to ``most``: the same requests in the same order at every rate
    (common random numbers), seeded, so that rates and SLOs compare on equal terms and the same inputs
    give the same answer."""

    gaps: np.ndarray  # of a unit-rate process, scaled to each rate tried
    prompts: np.ndarray
    outputs: np.ndarray
    most: float
    span: float
    prefix: PrefixBlocks | None = None
    fleet: int = LOAD_TEST_REPLICAS  # the fixed replicas tested

    @classmethod
    def of(cls, model: ReplicaModel, trace: Trace | None, replicas: int | None = None) -> LoadTest:
        """Requests drawn from ``trace`` (or the built-in length distribution), for ``replicas`` fixed
        replicas (by default ``LOAD_TEST_REPLICAS``). ``most`` is a little beyond what the replicas can
        serve: none prefills faster than its throughput, nor finishes more sequences than it holds decoding
        at their fastest (batch 1)."""
        rng = np.random.default_rng(0)
        prompt, output = request_lengths(trace, rng)
        mean_prompt, mean_output = max(float(np.mean(prompt)), 1.0), max(float(np.mean(output)), 1.0)
        holds = model.sequences_held(mean_prompt + mean_output)
        per_replica = min(model.prefill_tokens_per_s / mean_prompt, holds * model.decode_tokens_per_s / mean_output)
        fleet = replicas if replicas is not None else LOAD_TEST_REPLICAS
        most = 1.2 * fleet * per_replica
        span = min(LOAD_TEST_S, LOAD_TEST_MOST_REQUESTS / most)
        count = max(1, math.ceil(most * span * 1.5))
        gaps = rng.exponential(1.0, count)
        if trace is not None and trace.prefix is not None and model.prefix_caching:
            # In the trace's order, which decides what a prompt finds cached (a conversation's turns);
            # a random draw would repeat whole prompts, which the cache would hold.
            picks = np.arange(count, dtype=np.int64) % len(prompt)
            return cls(gaps, prompt[picks], output[picks], most, span, trace.prefix.repeated(count), fleet)
        picks = rng.integers(0, len(prompt), count)
        return cls(gaps, prompt[picks], output[picks], most, span, fleet=fleet)

    def at(self, rate: float) -> Trace:
        arrivals = np.cumsum(self.gaps / rate)
        n = max(1, int(np.searchsorted(arrivals, self.span)))
        prefix = self.prefix.head(n) if self.prefix is not None else None
        return Trace("load-test", arrivals[:n], self.prompts[:n], self.outputs[:n], prefix=prefix)

    def meets(self, model: ReplicaModel, rate: float, slo_ttft: float, slo_target: float) -> bool:
        return self.run(model, rate, slo_ttft, slo_target).meets(slo_target)

    def run(self, model: ReplicaModel, rate: float, slo_ttft: float, slo_target: float | None = None) -> RunResult:
        """The fixed replicas' run at ``rate`` (``fixed_run``)."""
        return fixed_run(self.at(rate), model, self.fleet, slo_ttft, slo_target)


def fixed_run(
    trace: Trace,
    model: ReplicaModel,
    replicas: int,
    slo_ttft: float,
    slo_target: float | None = None,
    by_minute: bool = False,
) -> RunResult:
    """``replicas`` fixed over ``trace``, no timeline; with ``slo_target``, stopped once it has certainly missed it;
    ``by_minute``: with each minute's misses and arrivals (``runner.run``)."""
    budget = None if slo_target is None else allowed_misses(trace, slo_target)
    contender = Contender("fixed", static=replicas)
    return run(trace, model, contender, replicas, slo_ttft, False, miss_budget=budget, by_minute=by_minute)


def sustained_rate(
    test: LoadTest,
    model: ReplicaModel,
    slo_ttft: float,
    slo_target: float,
    below: float | None = None,
    steps: int = LOAD_TEST_STEPS,
    above: float = 0.0,
) -> float:
    """The largest rate of ``test`` (requests per second) found to meet the SLO target, by bisection in
    ``steps`` between ``above`` (taken to meet it) and ``below`` (by default ``test.most``); ``above`` if
    none does."""
    low, high = above, test.most if below is None else below
    for _ in range(steps):
        rate = (low + high) / 2
        if test.meets(model, rate, slo_ttft, slo_target):
            low = rate
        else:
            high = rate
    return low


def held_decode_tokens_per_s(model: ReplicaModel, trace: Trace | None) -> float:
    """A replica's generation throughput at the largest batch of the trace's mean request it holds (its
    ``max_num_seqs``, or fewer where the KV cache runs out first): ``decodeTokensPerSecond`` of predictive's
    ``utilization`` block."""
    prompt, output = request_lengths(trace, np.random.default_rng(0))  # the load test's, drawn alike
    held = model.sequences_held(float(np.mean(prompt)) + float(np.mean(output)))
    return held * model.decode_rate(held)  # a step's tokens: each sequence's rate at that batch, read no context


PlanRun = Callable[[Plan, int, int], RunResult]
"""Runs the policy a plan writes over the trace from ``initial`` replicas, its ``maxReplicas`` at least ``most``,
with each minute's misses and arrivals: how ``checked_plan`` checks a plan."""


def follower_plan(
    model: ReplicaModel,
    trace: Trace | None,
    slo_ttft: float,
    slo_target: float,
    hold_s: float = DEFAULT_HOLD_S,
    check: PlanRun | None = None,
) -> Plan:
    """Predictive's ``utilization`` block for the trace: the utilization it starts at and the replicas it never
    goes below (``follower_plan.plan``: the follower replayed over the trace's minutes), by the replica's misses
    at each load and the trace's own burstiness.

    The steady test is of the fleet the trace's typical minute needs (``typical_fleet``) at the share found: first
    ``LOAD_TEST_REPLICAS``, then each test's fleet, until one repeats (``START_TESTS`` at most): replicas behind one
    router pool their bursts, so a larger fleet uses more of its compute (on the Azure conversation hour 0.49 at 8
    replicas, 0.55 at 16, 0.58 at 24). That fleet's test, at ``LOADS`` times the rate it sustains, measures the
    misses at each load, and the same fleet fixed over the trace how many times as many its arrivals miss
    (``burstiness``). Without a trace, or where no plan meets the aim, the follower starts at the steady test's
    share with no floor. Where a fixed fleet might hold fewer replica-minutes than the plan (``fixed_candidates``),
    the fewest replicas that, fixed over the trace, meet the SLO's target is the plan: that floor at a utilization of
    1 (``smallest_fixed_fleet``), from the fleet the oracle's busiest window needs, where static-best's search
    starts. The whole budget, not the aim: the run is the simulator's own over the trace, the test that finds
    static-best, where the aim's margin is for the replay's reading of misses off a steady test.
    Where none is, and ``check`` runs the policy a plan writes, the follower's plan is run over the trace and planned
    again by what it missed (``checked_plan``), and the fixed fleets tried against that: up to what its run held on
    average, or where that run missed the target, which bounds nothing, up to the most it held, and, where none of
    those meets it either, above (``fewest_fixed_from``): a plan known to miss is not written where a fixed fleet
    meets. ``hold_s`` is the scale-down window the follower holds its most work over."""
    decode = held_decode_tokens_per_s(model, trace)
    work = None if trace is None else minute_work(trace, model.prefill_tokens_per_s, decode)
    fleet, tested = LOAD_TEST_REPLICAS, set()
    while True:
        test = LoadTest.of(model, trace, fleet)
        rate = sustained_rate(test, model, slo_ttft, 1 - AIM * (1 - slo_target))
        each = float(np.mean(test.prompts / model.prefill_tokens_per_s + test.outputs / decode))
        steady = rate * each / test.fleet
        tested.add(fleet)
        if work is None or steady <= 0 or len(tested) == START_TESTS:  # none met: no fleet to size
            break
        fleet = typical_fleet(work, steady)
        if fleet in tested:
            break
    start = Plan(float(min(max(steady, LEAST), 1.0)), 0)
    if trace is None or work is None or steady <= 0 or not work.any():
        return start
    curve = miss_curve(test, model, rate, steady, slo_ttft)
    fixed = fixed_run(trace, model, test.fleet, slo_ttft, by_minute=True)
    assert fixed.missed_by_minute is not None and fixed.arrived_by_minute is not None  # binned as ``minute_work``
    bursts = burstiness(curve, work / test.fleet, fixed.missed_by_minute, fixed.arrived_by_minute)
    found = plan(work, curve.heavier(bursts), model.cold_start_s, hold_s, slo_target) or start
    known = {test.fleet: fixed.meets(slo_target)}
    busiest = oracle_bound(trace, model, 0, slo_ttft, slo_target).busiest_fleet
    candidates = fixed_candidates(work, found, model.cold_start_s, hold_s, busiest)
    fleet_found = smallest_fixed_fleet(trace, model, candidates, slo_ttft, slo_target, known)
    if fleet_found is None and check is not None:
        found, ran = checked_plan(work, curve.heavier(bursts), found, model.cold_start_s, hold_s, slo_target, check)
        mean = ran.gpu_hours * 3600 / (trace.duration_s * model.gpus_per_replica)
        held = mean if ran.meets(slo_target) else float(ran.max_replicas)  # a run that missed bounds nothing
        candidates = fixed_candidates(work, found, model.cold_start_s, hold_s, busiest, held)
        fleet_found = smallest_fixed_fleet(trace, model, candidates, slo_ttft, slo_target, known)
        if fleet_found is None and not ran.meets(slo_target):  # the plan missed, and no fleet it held meets
            least = max(candidates.start, candidates.stop)  # above what it held, from the busiest window's fleet
            fleet_found = fewest_fixed_from(trace, model, least, slo_ttft, slo_target, known, GROWN * least)
    return found if fleet_found is None else Plan(1.0, fleet_found)


def checked_plan(
    work: np.ndarray,
    curve: MissCurve,
    found: Plan,
    cold_start_s: float,
    hold_s: float,
    slo_target: float,
    check: PlanRun,
) -> tuple[Plan, RunResult]:
    """``found`` planned again by what its policy missed run over the trace, and the run of the plan returned. The
    replay reads a minute's misses off ``curve`` at the fleet a follower holds, and the policy is not that follower
    (it reads the work every tick, the budget's count moves its utilization, its replicas are whole): so the curve
    is taken as heavy as makes the replay's minutes miss what the run's did (``burstiness``, its prior holding it
    near 1), and the plan made on that curve. On the conversation hour at a 95 % target the policy spent 99.5 % of
    the budget where the replay read 85 %; planned again it holds 15 replicas under its follower and spends 81 %
    (docs/decisions/predictive-utilization.md)."""

    held = held_work(work, cold_start_s, hold_s)

    def ran(planned: Plan) -> tuple[RunResult, np.ndarray]:
        ordered, ready = fluid_fleet(held, planned.utilization, planned.floor, cold_start_s)
        return check(planned, int(ordered[0]), int(ordered.max())), ready

    first, ready = ran(found)
    assert first.missed_by_minute is not None and first.arrived_by_minute is not None  # binned as ``minute_work``
    heavier = burstiness(curve, work / ready, first.missed_by_minute, first.arrived_by_minute)
    again = plan(work, curve.heavier(heavier), cold_start_s, hold_s, slo_target) or found
    return (found, first) if again == found else (again, ran(again)[0])


def smallest_fixed_fleet(
    trace: Trace,
    model: ReplicaModel,
    candidates: range,
    slo_ttft: float,
    slo_target: float,
    known: dict[int, bool] | None = None,
) -> int | None:
    """The fewest of ``candidates`` replicas that, fixed over the trace, meet ``slo_target``, by bisection (a
    larger fleet misses no more, so a fleet ``known`` to meet it or not tells of those above or below, and the
    fleets run are added to it); None where the largest does not. The replay reads a minute's misses from a steady
    test, which a short overload misses less than: where a fixed fleet might be the cheaper plan, the simulator
    decides (docs/decisions/predictive-utilization.md)."""
    found = {} if known is None else known

    def meets(replicas: int) -> bool:
        if any(fleet >= replicas and not met for fleet, met in found.items()):
            return False
        if any(fleet <= replicas and met for fleet, met in found.items()):
            return True
        found[replicas] = fixed_run(trace, model, replicas, slo_ttft, slo_target).meets(slo_target)
        return found[replicas]

    if not candidates or not meets(candidates[-1]):
        return None
    low, high = candidates[0], candidates[-1]
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if meets(middle) else (middle + 1, high)
    return high


GROWTH = 1.25  # the fixed fleets tried above what a plan held: a quarter more each try
GROWN = 4  # and no more than four times the least of them: beyond, a fleet misses on its replicas' own speed


def fewest_fixed_from(
    trace: Trace,
    model: ReplicaModel,
    least: int,
    slo_ttft: float,
    slo_target: float,
    known: dict[int, bool] | None = None,
    most: int | None = None,
) -> int | None:
    """The fewest fixed replicas from ``least`` up that meet ``slo_target`` over ``trace``: a quarter more each try
    until one does (``smallest_fixed_fleet``'s ``known`` kept), then a bisection between it and the last that did not;
    None where none up to ``most`` does. Where the plan's own run missed and no fleet it held meets the target, the
    plan is found so rather than written to miss: on a recorded hour made burstier (six-minute stretches at 2.5 and
    0.6 times its rate, a 240 s cold start) the follower over a floor of 44 missed (98.2 %) and no fleet up to 43
    met, where 50 fixed meet (99.04 %, static-best's fleet; tests/test_sizing.py)."""
    found = {} if known is None else known
    low = high = least
    while smallest_fixed_fleet(trace, model, range(high, high + 1), slo_ttft, slo_target, found) is None:
        if most is not None and high >= most:
            return None
        low, high = high + 1, math.ceil(high * GROWTH)
        high = high if most is None else min(high, most)
    return smallest_fixed_fleet(trace, model, range(low, high + 1), slo_ttft, slo_target, found)


def miss_curve(test: LoadTest, model: ReplicaModel, rate: float, steady: float, slo_ttft: float) -> MissCurve:
    """The share of first tokens the steady ``test`` misses at ``LOADS`` times its sustained ``rate`` (a load of
    ``steady`` times as much). Every one is taken to miss from the first load at which half do, and at a rate the
    test has too few requests to hold for its whole span (a burst, not a steady load: beyond what the replicas
    serve, where a steady load's queue grows without end)."""
    shares: list[float] = []
    for times in LOADS:
        if (shares and shares[-1] >= 0.5) or rate * times * test.span > len(test.gaps):
            shares.append(1.0)
            continue
        shares.append(1.0 - test.run(model, rate * times, slo_ttft).slo_attainment)
    return MissCurve(steady * np.asarray(LOADS), np.asarray(shares))


def minute_work(trace: Trace, prefill_tokens_per_s: float, decode_tokens_per_s: float) -> np.ndarray:
    """The replicas' worth of work arriving in each minute of the trace: prompt tokens at the prefill speed, output
    tokens at the decode speed, as ``utilization.work_in_replicas`` counts it."""
    cost = trace.prompt_tokens / prefill_tokens_per_s + trace.output_tokens / decode_tokens_per_s
    work: np.ndarray = np.bincount(trace.minutes, weights=cost) / 60.0
    return work


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The value at or above which half of ``weights`` lies (the lower median of the weighted values)."""
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    middle = int(np.searchsorted(cumulative, cumulative[-1] / 2))
    return float(values[order][min(middle, len(order) - 1)])


def typical_fleet(work: np.ndarray, utilization: float) -> int:
    """The replicas a trace's typical minute needs at ``utilization``: the work-weighted median of its minutes'
    ``work`` (``minute_work``: where most of its requests are served), over ``utilization``, rounded up; at least
    one."""
    if not work.any():
        return 1
    return max(1, math.ceil(weighted_median(work, work) / utilization - 1e-9))


def tighter_than_reference(slo_ttft: float, slo_target: float) -> bool:
    return slo_ttft < REFERENCE_SLO_TTFT_S or slo_target > REFERENCE_SLO_TARGET


@dataclass(frozen=True)
class Shares:
    """The part of the built-in targets a replica takes: ``slo`` of the prompt-token and running targets,
    for the SLO; ``mix`` of the prompt-token target besides, for the trace's own requests."""

    slo: float = 1.0
    mix: float = 1.0
    # Of ``slo``, the part for a replica on which the SLO is tighter than on the built-in one (``replica_slack``).
    replica: float = 1.0

    @property
    def prompt_tokens(self) -> float:
        """The part of the prompt-token target taken, for the SLO and the requests together."""
        return self.slo * self.mix


def load_test_needed(trace: Trace, slo_ttft: float, slo_target: float, model: ReplicaModel) -> bool:
    """Whether ``builtin_shares`` load-tests anything: for a tighter SLO than the reference, for requests
    other than the built-in distribution's, or for a replica that serves otherwise than the built-in one."""
    return tighter_than_reference(slo_ttft, slo_target) or not trace.builtin_lengths or not at_least_builtin(model)


def at_least_builtin(model: ReplicaModel) -> bool:
    """Whether ``model``'s replica has at least each capacity of the built-in one, and serves alike
    otherwise: then the SLO is no tighter on it, and ``replica_slack`` needs no load test."""
    builtin = ReplicaModel()
    alike = all(getattr(model, name) == getattr(builtin, name) for name in SERVING_MODE_FIELDS)
    return alike and all(getattr(model, name) >= getattr(builtin, name) for name in CAPACITY_FIELDS)


def replica_slack(model: ReplicaModel, slo_ttft: float, slo_target: float, own_rate: float | None = None) -> float:
    """How much of the built-in prompt-token target ``model``'s replica carries within the SLO, against
    what the built-in replica carries of its own within the reference SLO: the load test's sustained rate
    in units of each one's prefill throughput (the target is half of it), on the built-in request
    lengths. 1 for the built-in replica.

    A replica whose prefill is slow takes the SLO's time in a prompt or two: 600 prompt tokens/s prefill
    the mean prompt in 1.9 s of a 2 s SLO, and 8 such replicas sustain 0.40 of the target where the
    built-in ones sustain 0.83 (docs/simulation.md). ``own_rate``: the rate ``model``'s load test of the
    built-in lengths sustains under the SLO, if ``builtin_shares`` has already found it."""
    reference = model.model_copy(update={name: ReplicaModel.model_fields[name].default for name in SERVING_FIELDS})
    if reference == model:
        return 1.0
    if own_rate is None:
        own_rate = sustained_rate(LoadTest.of(model, None), model, slo_ttft, slo_target)
    rate = sustained_rate(LoadTest.of(reference, None), reference, REFERENCE_SLO_TTFT_S, REFERENCE_SLO_TARGET)
    return (own_rate / model.prefill_tokens_per_s) / (rate / reference.prefill_tokens_per_s) if rate > 0 else 1.0


def builtin_shares(model: ReplicaModel, trace: Trace, slo_ttft: float, slo_target: float) -> Shares:
    """How much of the built-in targets a replica takes for this trace's requests and this SLO.

    ``slo``: all of them under an SLO no tighter than the reference (2 s for 99 % of requests); under a
    tighter one (a shorter time or a higher target), the square root of the rate the load test sustains
    under it over the rate it sustains under the reference, on the trace's requests.

    The square root, not the ratio: a fleet pools its load over more replicas than the load test, and holds headroom
    besides. A looser SLO keeps the targets: its misses come from bursts, not from the steady queueing the test
    measures (measured: docs/decisions/builtin-sizing.md, the built-in shares). Never below
    ``LEAST_SHARE``, which an SLO no load meets would otherwise take to zero.

    A slow replica makes any SLO tighter, and so it is sized: the ratio above is taken times ``replica_slack`` where
    that is below 1 (``replica``, its root, is reported). A fast replica keeps the targets: scaled up by its slack,
    the built-in day's surges found it at saturation.

    ``mix``: the prompt-token target is half the prefill throughput for requests of the built-in length
    distribution. Other requests sustain other prompt-token rates under the same SLO (the reference, or
    the user's if it is looser): long prompts less (each one's prefill holds up those behind it), prompts
    with short outputs more (less of the replica goes to decoding): requests of four times the built-in
    prompts sustain half its prompt-token rate, at 2 s as at 3 s. The share is the square
    root of the trace's rate over the built-in distribution's, less the load test's own spread
    (``MIX_SPREAD``), at most ``MOST_MIX_RATIO``'s root.
    The running target needs no such share: it is already sized for the trace's mean request.
    """
    if not load_test_needed(trace, slo_ttft, slo_target, model):
        return Shares()
    tighter = tighter_than_reference(slo_ttft, slo_target)
    # The SLO the targets stand for before the ``slo`` share: the reference, or the user's if looser.
    sized_for = (REFERENCE_SLO_TTFT_S, REFERENCE_SLO_TARGET) if tighter else (slo_ttft, slo_target)
    test = LoadTest.of(model, trace)
    reference = sustained_rate(test, model, *sized_for)
    if reference <= 0:
        return Shares()  # no load meets even that SLO: nothing to scale from
    ratio = 1.0
    if tighter:
        ratio = sustained_rate(test, model, slo_ttft, slo_target, below=reference, steps=TIGHTER_STEPS) / reference
    # Requests of the built-in lengths on this replica under that SLO: what both the replica's slack and
    # the trace's mix are measured against, so bisected once for the two.
    builtin = LoadTest.of(model, None)
    builtin_rate = 0.0
    if not at_least_builtin(model) or not trace.builtin_lengths:
        builtin_rate = sustained_rate(builtin, model, *sized_for)
    replica = 1.0 if at_least_builtin(model) else min(1.0, replica_slack(model, *sized_for, own_rate=builtin_rate))
    slo = max(LEAST_SHARE, math.sqrt(min(1.0, ratio * replica)))
    mix = 1.0
    if not trace.builtin_lengths and builtin_rate > 0:
        builtin_prompt_rate = builtin_rate * float(np.mean(builtin.prompts))
        mix = mix_share(reference * float(np.mean(test.prompts)) / builtin_prompt_rate)
    return Shares(slo, mix, math.sqrt(replica))


def mix_share(ratio: float) -> float:
    """The prompt-token share for requests that sustain ``ratio`` times the built-in distribution's rate:
    the square root of the part of the ratio beyond the load test's own spread."""
    if ratio < MIX_SPREAD:
        ratio /= MIX_SPREAD
    elif ratio > 1 / MIX_SPREAD:
        ratio *= MIX_SPREAD
    else:
        ratio = 1.0
    return max(LEAST_SHARE, math.sqrt(min(MOST_MIX_RATIO, ratio)))
