"""``--tune``: each policy's cheapest setting of its sizing knob that meets the SLO on the trace."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from policies.policy_file import PolicyFile, Workload
from policies.predictive import PredictiveParams, with_settings
from policies.registry import policy_class
from policies.threshold import ThresholdParams
from simulations.contenders import policy_contender, policy_variant, workload_variant
from simulations.replica_model import ReplicaModel
from simulations.runner import RunResult, allowed_misses, run
from simulations.traces import Trace


def tuning_knob(policy_type: str) -> str:
    """The knob a policy declares (``tuning_knob`` on its class), so tuning hard-codes no policy's internals."""
    knob = policy_class(policy_type).tuning_knob
    if not isinstance(knob, str):
        raise ValueError(f"policy type {policy_type!r} declares no tuning_knob, so --tune cannot tune it")
    return knob


def knob_variant(
    document: PolicyFile, workload: Workload, policy_type: str, setting: dict[str, float]
) -> tuple[PolicyFile, Workload]:
    """The workload running ``policy_type`` with ``setting``, as ``tune`` names its settings.

    ``target`` sets the first metric's target and scales the others with it, so that, like a headroom, it
    sets the capacity asked of each replica on every signal; a target equal to the file's to the four
    decimals ``tune`` names it with keeps the file's targets (its "as given"). Every other key is a
    parameter of the policy block: ``setpoint`` (``pid``), ``headroom``, ``maxGrowth`` (``predictive``, without
    its ``utilization`` block), or ``utilizationStart`` (``predictive`` with it, the block's ``start``).
    """
    knobs = {k: v for k, v in setting.items() if k != "target"}
    block = policy_block(workload, policy_type) if FOLLOWER_KNOB in setting else searched_block(workload, policy_type)
    policy = with_settings(block, knobs) if policy_type == "predictive" else {**block, **knobs}
    first = workload.metrics[0].target.value
    if "target" not in setting or setting["target"] == round(first, 4):
        return policy_variant(document, workload, policy)
    value = setting["target"]
    if workload.capacity is not None:  # its metrics are built from it: scale it, as the targets would be
        scale = value / first
        capacity = workload.capacity.model_dump(by_alias=True, mode="json")
        for key in ("promptTokensPerSecond", "runningRequests", "waitingRequests"):
            capacity[key] = round(capacity[key] * scale, 4)
        return workload_variant(document, workload, {"policy": policy, "capacity": capacity})
    metrics = [m.model_dump(by_alias=True, exclude_none=True, mode="json") for m in workload.metrics]
    for metric in metrics:
        metric["target"]["value"] = value if metric is metrics[0] else metric["target"]["value"] * value / first
    return policy_variant(document, workload, policy, metrics)


def policy_block(workload: Workload, policy_type: str) -> dict[str, Any]:
    """The file's own block for that type, or the type's defaults."""
    return dict(workload.policy) if workload.policy_type == policy_type else {"type": policy_type}


def cheapest_meeting(
    attempt: Callable[[float, bool], RunResult], safe_x: float, cheap_x: float, steps: int, slo_target: float
) -> tuple[float, RunResult]:
    """Bisection of a knob ``x`` between its safe end (most capacity) and its cheap end for the cheapest run
    that meets ``slo_target``; ``attempt(x, full)`` runs it (unless ``full``, stopping once it has missed).

    The cheap end is run first, and ends the search if it meets the target. The safe end is run last, and only
    when no setting tried below it met the target: it holds the most replicas for the whole trace, so it is the
    longest run of the search, and what it would tell, that the search has a setting that meets the SLO, the
    first setting that meets it tells too. It is reported even if it misses."""
    cheap = attempt(cheap_x, False)
    if cheap.meets(slo_target):
        return cheap_x, cheap
    found: tuple[float, RunResult] | None = None
    good, bad = safe_x, cheap_x
    for _ in range(steps):
        mid = (good + bad) / 2
        result = attempt(mid, False)
        if result.meets(slo_target):
            good = mid
            if found is None or result.gpu_hours <= found[1].gpu_hours:
                found = mid, result
        else:
            bad = mid
    return found or (safe_x, attempt(safe_x, True))


def tune(
    trace: Trace,
    model: ReplicaModel,
    document: PolicyFile,
    workload: Workload,
    policy_type: str,
    initial: int,
    slo_ttft: float,
    slo_target: float,
    tick: Callable[[str], None],
    steps: int = 7,
    stop: Callable[[], bool] | None = None,
) -> RunResult:
    """The cheapest setting of the policy's sizing knob that meets the SLO target, by bisection between a
    safe end and a cheap end.

    The knobs are searched over the same span of capacity per replica, in log space: a target or setpoint
    from 1/8 to 4 times the file's (capacity falls as it shrinks), a headroom ``h`` with ``1 + h`` from 8
    down to 1/4 (a negative headroom runs replicas hotter than the targets). So the tuned policies are
    compared at equal effort, with the same sizes tried.

    ``predictive`` has more settings: its trend (``maxGrowth``, its ``trend`` block's), its fleet's pooling
    (``poolingGain``, its ``pooling`` block's) and its hold on rises under ``minRiseReplicas``. With all three off,
    headroom 0 and threshold's tolerance (if the file gives it another) it makes threshold's decisions at the same
    targets, exactly (both in the HPA's milli-units, ``demand_in_replicas``), so its capacity is first searched so, on
    its targets as threshold's are: that search is threshold's, run for run, and tuned ``predictive`` never costs more
    than tuned ``threshold``. (Searching the headroom there instead is the same capacity but not the same runs:
    threshold's scaled targets are rounded up to thousandths, the headroom is not, and at the SLO's edge a run moved
    by that meets where the other misses.) With the pooling on, its headroom is searched too, pooled, and kept if it
    meets the SLO for less. Then headroom 0 at the file's targets (threshold's "as given"), and at the setting found
    the trend, and after it the hold, as the file sets them, each kept if it meets the SLO for less. The hold is not
    searched with: on small fleets it keeps one replica fewer for a need less than half a replica higher, and a surge
    that meets that fleet waits a cold start for the difference (an H100-like replica on the built-in day's shape at
    16 requests/s: at threshold's tuned capacity the hold missed the SLO, 0.958, where threshold met it, 0.9995).

    With a ``utilization`` block (the follower of its work), its ``start`` is searched first (``utilizationStart``,
    from ``LEAST_START`` to 1), the budget moving it from there in every run, and the start as given is run too;
    the classic search runs beside it, and the cheaper that meets the SLO is kept.

    Last, the policy runs as the file sets it, kept if it meets the SLO for less than every setting tried.
    """
    first = workload.metrics[0].target.value
    budget = allowed_misses(trace, slo_target)
    spans = {  # knob: (safe end, cheap end), in log space
        "headroom": (math.log(8.0), math.log(0.25)),
        "target": (math.log(first / 8.0), math.log(first * 4.0)),
        "setpoint": (math.log(first / 8.0), math.log(first * 4.0)),
        FOLLOWER_KNOB: (math.log(LEAST_START), 0.0),  # a tenth of a replica's compute, to all of it
    }

    def value(knob: str, x: float) -> float:
        return round(math.exp(x) - 1.0, 4) if knob == "headroom" else round(math.exp(x), 4)

    def attempt(setting: dict[str, float], full: bool = False) -> RunResult:
        """One setting's run; unless ``full``, it stops once it has certainly missed the SLO target (such a
        run is only ever used to say so)."""
        doc, wl = knob_variant(document, workload, policy_type, setting)
        contender = policy_contender(doc, wl, model, policy_type, setting)
        result = run(trace, model, contender, initial, slo_ttft, miss_budget=None if full else budget, stop=stop)
        tick(f"tune {policy_type} {','.join(f'{k}={v}' for k, v in setting.items())}")
        return result

    def search(knob: str, fixed: dict[str, float]) -> tuple[dict[str, float], RunResult]:
        safe_x, cheap_x = spans[knob]

        def at(x: float) -> dict[str, float]:
            return {knob: value(knob, x), **fixed}

        x, result = cheapest_meeting(lambda x, full: attempt(at(x), full), safe_x, cheap_x, steps, slo_target)
        return at(x), result

    def cheaper(a: RunResult, b: RunResult) -> bool:
        return a.meets(slo_target) and (not b.meets(slo_target) or a.gpu_hours < b.gpu_hours)

    if policy_type != "predictive":
        best = search(tuning_knob(policy_type), {})[1]
    else:
        best = _tune_predictive(workload, search, attempt, cheaper)
    # The setting given may fall between the ones tried, and attainment is not quite monotone in the knob
    # (the built-in day met the SLO at the default headroom, 0.6, and missed it at one tried just above):
    # tuning never reports a dearer setting than the one it was given. It runs as tuning names it, so that
    # the file ``--write-config`` writes from that name runs it again to the request.
    doc, wl = policy_variant(document, workload, searched_block(workload, policy_type))
    as_given = attempt(given_setting(wl, policy_type, policy_contender(doc, wl, model).settings() or {}))
    return as_given if cheaper(as_given, best) else best


Attempt = Callable[..., RunResult]
FOLLOWER_KNOB = "utilizationStart"
LEAST_START = 0.1


def searched_block(workload: Workload, policy_type: str) -> dict[str, Any]:
    """The block tuning searches from: the file's own (``policy_block``), predictive's without its ``utilization``
    block, which sizes by the work alone, so no target or headroom moves it (the utilization's own search is its
    budget's, docs/decisions/predictive-utilization.md)."""
    return {k: v for k, v in policy_block(workload, policy_type).items() if k != "utilization"}


def _tune_predictive(
    workload: Workload,
    search: Callable[[str, dict[str, float]], tuple[dict[str, float], RunResult]],
    attempt: Attempt,
    cheaper: Callable[[RunResult, RunResult], bool],
) -> RunResult:
    """``predictive``'s search, as ``tune``'s docstring tells it: its capacity searched as threshold's is (and its
    headroom too with pooling), threshold's targets as given, then its trend and its hold as the file sets them."""
    params = PredictiveParams.model_validate(policy_block(workload, "predictive"))
    extras_off = {"maxGrowth": 0.0, "minRiseReplicas": 0.0}
    as_threshold = {"headroom": 0.0, **extras_off, **({"poolingGain": 0.0} if params.pooling is not None else {})}
    threshold = ThresholdParams.model_validate(policy_block(workload, "threshold"))
    if params.tolerance != threshold.tolerance:
        as_threshold["tolerance"] = threshold.tolerance  # and threshold's band, or its decisions are another's
    candidates: list[tuple[dict[str, float], RunResult]] = []
    if params.utilization is not None:
        # The follower of the work, as the file runs it: its start searched, its budget moving it from there
        # (docs/decisions/predictive-utilization.md); the classic sizing below is searched beside it.
        candidates.append(search(FOLLOWER_KNOB, {}))
        given = {FOLLOWER_KNOB: params.utilization.start}
        candidates.append((given, attempt(given)))
    if params.pooling is not None:
        # Pooling sizes a large fleet below its targets, which no target of threshold's does.
        candidates.append(search("headroom", extras_off))
    candidates.append(search("target", as_threshold))
    # Tuned threshold also runs its targets as given, which no step of the bisection may land on.
    candidates.append((as_threshold, attempt(as_threshold)))
    setting, best = candidates[0]
    for other_setting, other in candidates[1:]:
        if cheaper(other, best):
            setting, best = other_setting, other
    if FOLLOWER_KNOB in setting:  # the trend and the hold are the follower's own, as the file sets them
        return best
    for extra in ({"maxGrowth": params.trend.max_growth}, {"minRiseReplicas": params.min_rise_replicas}):
        tried = {**setting, **extra}
        if tried != setting:
            result = attempt(tried)
            if cheaper(result, best):
                setting, best = tried, result
    return best


def given_setting(workload: Workload, policy_type: str, settings: dict[str, Any]) -> dict[str, float]:
    """The sizing knob's value (and predictive's trend) that ``workload`` runs its ``policy_type`` policy
    with, from the ``settings`` its contender reports (defaults worked out), named as ``tune`` names its
    settings."""
    if policy_type == "threshold":
        return {"target": round(workload.metrics[0].target.value, 4)}
    if policy_type == "pid":
        primary = next((m for m in workload.metrics if m.name == settings.get("metric")), workload.metrics[0])
        return {"setpoint": round(settings.get("setpoint", primary.target.value), 4)}
    return {
        "headroom": round(settings["headroom"], 4),
        "maxGrowth": settings["trend"]["maxGrowth"],
        "minRiseReplicas": settings["minRiseReplicas"],
    }
