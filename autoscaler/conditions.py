"""A workload's state as the HPA's three conditions, read from the tick's decision line.

``kubectl describe hpa`` tells an operator whether the autoscaler can write (``AbleToScale``), whether it has
metrics to decide on (``ScalingActive``) and whether a bound or a rate limit held its count back
(``ScalingLimited``). This controller keeps the same three, with the HPA's reasons where the HPA has one
(``ReadyForNewScale``, ``SucceededRescale``, ``FailedGetScale``, ``FailedUpdateScale``, ``ValidMetricFound``,
``FailedGetExternalMetric``, ``ScalingDisabled``, ``TooManyReplicas``, ``TooFewReplicas``, ``ScaleUpLimit``,
``ScaleDownLimit``, ``DesiredWithinRange``, ``ScaleUpStabilized``, ``ScaleDownStabilized``) and words of its own
for what the HPA does not do (``DryRun``, ``ForeignAutoscaler``, ``OwnerUnknown``, ``Paused``, ``NotLeader``,
``WarmingUp``, ``ScaledToZero``). A tick that cannot judge a condition (the target unreadable says nothing about
the metrics) leaves it as it was, as the HPA does; ``merge`` keeps when each last changed.

Worked example: a policy asking for 9 at ``maxReplicas`` 8 gives ``ScalingLimited True TooManyReplicas`` beside
``AbleToScale True SucceededRescale`` (tests/test_conditions.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from policies.pipeline import Reason

Status = Literal["True", "False", "Unknown"]
TYPES = ("AbleToScale", "ScalingActive", "ScalingLimited")


class Condition(BaseModel):
    """One condition as the HPA's status carries it (``autoscaling/v2`` ``HorizontalPodAutoscalerCondition``)."""

    model_config = ConfigDict(populate_by_name=True)

    type: str
    status: Status
    reason: str
    message: str
    last_transition_time: float | None = Field(default=None, alias="lastTransitionTime")  # wall-clock seconds


CONDITION_FIELDS = set(Condition.model_fields)


def _able(line: dict[str, Any]) -> tuple[Status, str, str] | None:
    reason, write = line.get("reason"), line.get("write")
    if str(reason or "").startswith("target-"):
        return "False", "FailedGetScale", f"cannot read the target's scale: {line.get('detail') or reason}"
    if reason == "foreign-autoscaler":
        return "False", "ForeignAutoscaler", f"not scaling: already targeted by {', '.join(line.get('owners', []))}"
    if reason == "owner-unknown":
        return "False", "OwnerUnknown", "not scaling: cannot tell whether another autoscaler owns the target"
    if reason == "paused":
        return "False", "Paused", "scaling paused by the target's annotation"
    if line.get("dry_run"):
        owners = line.get("owners")
        beside = f" beside {', '.join(owners)}" if owners else ""
        return "False", "DryRun", f"dry-run: decides{beside} and writes nothing"
    if write == "not-leader":
        return "False", "NotLeader", "a standby: the replica holding the Lease writes"
    if write is not None and not line.get("applied"):
        return (
            "False",
            "FailedUpdateScale",
            f"cannot update the target's scale: {write} {line.get('detail') or ''}".strip(),
        )
    if line.get("applied"):
        return "True", "SucceededRescale", f"the controller updated the target's scale to {line.get('desired')}"
    if "desired" not in line:
        return None
    stabilized, recommended = line.get("stabilized"), line.get("recommended")
    if reason == Reason.STABILIZED and stabilized is not None and recommended is not None:
        if recommended < stabilized:
            return "True", "ScaleDownStabilized", "recent recommendations were higher than the current one"
        return "True", "ScaleUpStabilized", "recent recommendations were lower than the current one"
    return "True", "ReadyForNewScale", "recommended size matches current size"


def _active(line: dict[str, Any]) -> tuple[Status, str, str] | None:
    reason = line.get("reason")
    if reason in (Reason.METRICS_UNAVAILABLE, Reason.FALLBACK):
        failures = line.get("metric_failures") or {}
        why = "; ".join(f"{name}: {what}" for name, what in sorted(failures.items())) or "no usable metric value"
        fallback = " (holding the fallback count)" if reason == Reason.FALLBACK else ""
        return "False", "FailedGetExternalMetric", f"cannot compute the replica count{fallback}: {why}"
    if reason == Reason.SCALING_DISABLED:
        return "False", "ScalingDisabled", "scaling is disabled since the replica count of the target is zero"
    if reason == Reason.SCALED_TO_ZERO:
        return "False", "ScaledToZero", "idle: at zero until the activation signal wakes it"
    if reason == "warming-up":
        return "False", "WarmingUp", "reading the metrics' history before the first decision"
    if "recommended" not in line:
        return None
    demand = (line.get("policy") or {}).get("demand") or {}
    named = [k for k, v in demand.items() if isinstance(v, int | float)]
    source = (
        max(named, key=lambda k: demand[k]) if named else ", ".join(sorted(line.get("metrics") or {})) or "its signals"
    )
    return "True", "ValidMetricFound", f"the policy computed a replica count from {source}"


def _limited(line: dict[str, Any], lo: int, hi: int) -> tuple[Status, str, str] | None:
    if "desired" not in line or line.get("reason") in (
        Reason.METRICS_UNAVAILABLE,
        Reason.SCALING_DISABLED,
        Reason.SCALED_TO_ZERO,
    ):
        return None
    recommended, desired, stabilized = line.get("recommended"), line["desired"], line.get("stabilized")
    if recommended is not None and recommended > hi:
        return "True", "TooManyReplicas", f"the desired replica count is more than the maximum replica count ({hi})"
    if recommended is not None and recommended < lo:
        return "True", "TooFewReplicas", f"the desired replica count is less than the minimum replica count ({lo})"
    if line.get("reason") == Reason.BOUNDS:  # the count itself was outside them
        if desired >= hi:
            return "True", "TooManyReplicas", f"the current replica count is more than the maximum ({hi})"
        return "True", "TooFewReplicas", f"the current replica count is less than the minimum ({lo})"
    if line.get("reason") == "catching-up" and recommended is not None and recommended < desired:
        return "True", "CatchingUp", "a lower count is held while the metrics' older history is read"
    if line.get("reason") == Reason.RATE_LIMITED and stabilized is not None:
        if stabilized > desired:
            return "True", "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
        return "True", "ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate"
    return "False", "DesiredWithinRange", "the desired count is within the acceptable range"


def judge(line: dict[str, Any], min_replicas: int, max_replicas: int) -> dict[str, tuple[Status, str, str]]:
    """The conditions this tick's ``line`` tells, by type; a type it cannot judge is absent."""
    found = {
        "AbleToScale": _able(line),
        "ScalingActive": _active(line),
        "ScalingLimited": _limited(line, min_replicas, max_replicas),
    }
    return {kind: value for kind, value in found.items() if value is not None}


def merge(previous: list[Condition], judged: dict[str, tuple[Status, str, str]], now: float) -> list[Condition]:
    """The conditions after this tick: each judged one replaces the last, keeping its ``lastTransitionTime`` while
    its status holds (as the HPA's ``setCondition`` does); one not judged stays as it was."""
    old = {c.type: c for c in previous}
    out = []
    for kind in TYPES:
        before = old.get(kind)
        if kind not in judged:
            if before is not None:
                out.append(before)
            continue
        status, reason, message = judged[kind]
        message = message[:300]
        if before is not None and (before.status, before.reason, before.message) == (status, reason, message):
            out.append(before)  # unchanged: the same object, not another validated one every tick
            continue
        since = before.last_transition_time if before is not None and before.status == status else now
        # Built from the controller's own values: not validated, and one set of fields for all (a validated
        # Condition is 870 bytes, three a workload: 26 MB at 10,000).
        out.append(
            Condition.model_construct(
                _fields_set=CONDITION_FIELDS,
                type=kind,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=since,
            )
        )
    return out
