"""The data a decision needs: metric targets and the HPA v2 ``behavior`` schema.

These are pydantic models so that the policy file can embed them directly, but they hold no I/O: the
decision code only reads them. Field names follow the Kubernetes API (camelCase) so that a ``behavior``
block can be pasted from an HPA or a KEDA ScaledObject unchanged.
"""

from __future__ import annotations

import functools
import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

_DURATION = re.compile(r"^\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m(?!s))?\s*(?:(\d+)s)?\s*$")


def parse_duration(value: Any) -> Any:
    """Accept integer seconds, or a string such as ``"90s"``, ``"5m"``, ``"1h30m"``, ``"7d"`` or ``"300"``.

    Anything else is passed through so that pydantic reports the type error with its field path.
    """
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string such as '90s' or '5m'")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        match = _DURATION.match(text)
        if not text or match is None or not any(match.groups()):
            raise ValueError(f"invalid duration {value!r}: use integer seconds or a string such as '90s' or '5m'")
        days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
        return days * 86400 + hours * 3600 + minutes * 60 + seconds
    return value


DURATION_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": _DURATION.pattern},
    ],
    "description": "seconds, or a duration such as '90s', '5m', '1h30m', '7d'",
}
Duration = Annotated[int, BeforeValidator(parse_duration), WithJsonSchema(DURATION_SCHEMA)]
SECONDS_SCHEMA = {
    "anyOf": [{"type": "number", "minimum": 0}, DURATION_SCHEMA["anyOf"][1]],
    "description": "seconds (fractions allowed), or a duration such as '90s', '5m', '1h30m'",
}
Seconds = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(SECONDS_SCHEMA)]
"""A time in seconds that may be fractional; the same duration strings as :data:`Duration`."""


class StrictModel(BaseModel):
    """Unknown keys are errors everywhere in the policy file, and so are infinite and NaN numbers."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)


def refuse_moved(data: Any, moved: dict[str, str]) -> Any:
    """A block's raw ``data`` unchanged, or one error naming where each key in ``moved`` went (a file written
    for an earlier layout is told what to write, not only that the key is unknown)."""
    if isinstance(data, dict) and (found := [key for key in moved if key in data]):
        raise ValueError("; ".join(f"{key} moved to {moved[key]}" for key in found))
    return data


class TargetType(StrEnum):
    AVERAGE_VALUE = "AverageValue"
    VALUE = "Value"


class MetricTarget(StrictModel):
    type: TargetType = Field(
        default=TargetType.AVERAGE_VALUE,
        description="AverageValue: the value is the fleet's total, divided by the target per replica; "
        "Value: the value is a level, proposing current * value / target (as the HPA)",
    )
    value: float = Field(gt=0, description="the target: per replica under AverageValue, the level under Value")


class MetricSpec(StrictModel):
    name: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z_][A-Za-z0-9_:.\-]*$",
        description="a built-in metric (its query is known) or a name of your own, which needs a query",
    )
    query: str | None = Field(
        default=None, description="PromQL giving one value for the workload; unset: the built-in metric's query"
    )
    target: MetricTarget = Field(description="what one replica should carry, or the level to hold")


class PolicyType(StrEnum):
    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(StrEnum):
    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


class ScalingPolicy(StrictModel):
    type: PolicyType = Field(description="Pods: at most value replicas per period; Percent: value % of the count")
    value: int = Field(gt=0, description="replicas, or a percentage, per period")
    period_seconds: Duration = Field(
        alias="periodSeconds", ge=1, le=1800, description="the rate limit's window: changes within it are summed"
    )


class ScalingRules(StrictModel):
    """One direction of ``behavior``; ``None`` fields take the HPA default of their direction."""

    stabilization_window_seconds: Duration | None = Field(
        default=None,
        alias="stabilizationWindowSeconds",
        ge=0,
        le=3600,
        description="act on the most conservative recommendation of this window (HPA: 0 up, 300 down)",
    )
    select_policy: SelectPolicy | None = Field(
        default=None,
        alias="selectPolicy",
        description="Max (default) or Min of the policies' limits; Disabled: never in this direction",
    )
    policies: list[ScalingPolicy] | None = Field(
        default=None, description="rate limits; unset: the HPA's defaults for this direction"
    )
    tolerance: float | None = Field(
        default=None,
        ge=0,
        description="a change within this fraction of the count is ignored (the HPA's per-direction tolerance)",
    )


DEFAULT_SCALE_UP = ScalingRules(
    stabilizationWindowSeconds=0,
    selectPolicy=SelectPolicy.MAX,
    policies=[
        ScalingPolicy(type=PolicyType.PODS, value=4, periodSeconds=15),
        ScalingPolicy(type=PolicyType.PERCENT, value=100, periodSeconds=15),
    ],
)
DEFAULT_SCALE_DOWN = ScalingRules(
    stabilizationWindowSeconds=300,
    selectPolicy=SelectPolicy.MAX,
    policies=[ScalingPolicy(type=PolicyType.PERCENT, value=100, periodSeconds=15)],
)


def _with_defaults(rules: ScalingRules | None, default: ScalingRules) -> ScalingRules:
    """Fill unset fields from the direction's default, as ``GenerateHPAScale{Up,Down}Rules`` does."""
    if rules is None:
        return default
    return ScalingRules(
        stabilizationWindowSeconds=(
            rules.stabilization_window_seconds
            if rules.stabilization_window_seconds is not None
            else default.stabilization_window_seconds
        ),
        selectPolicy=rules.select_policy or default.select_policy,
        policies=rules.policies if rules.policies else default.policies,
        tolerance=rules.tolerance,
    )


class Behavior(StrictModel):
    scale_up: ScalingRules | None = Field(default=None, alias="scaleUp", description="rules for adding replicas")
    scale_down: ScalingRules | None = Field(default=None, alias="scaleDown", description="rules for removing replicas")

    def resolved(self) -> ResolvedBehavior:
        """Every default filled in; behaviors alike share one, read and never written (7.8 MB of copies at 10,000
        workloads)."""
        return _resolved(self.model_dump_json(by_alias=True))


@functools.lru_cache(maxsize=1024)
def _resolved(text: str) -> ResolvedBehavior:
    behavior = Behavior.model_validate_json(text)
    return ResolvedBehavior(
        up=_with_defaults(behavior.scale_up, DEFAULT_SCALE_UP),
        down=_with_defaults(behavior.scale_down, DEFAULT_SCALE_DOWN),
    )


class ResolvedBehavior(StrictModel):
    """``behavior`` with every default filled in: what the normalizer reads."""

    up: ScalingRules
    down: ScalingRules

    @property
    def up_window(self) -> int:
        return self.up.stabilization_window_seconds or 0

    @property
    def down_window(self) -> int:
        return self.down.stabilization_window_seconds or 0


class Fallback(StrictModel):
    """What to do after ``failureThreshold`` consecutive ticks without usable metrics.

    Without ``replicas`` the count is held (the default). With it, the count goes to ``replicas`` through
    the normal behavior (windows and rate limits) and stays there until metrics return; the recorded
    recommendations then smooth the way back, so it never flips between two counts the way a synthetic
    metric value can.
    """

    failure_threshold: int = Field(
        default=3, alias="failureThreshold", ge=1, description="ticks in a row without usable metrics"
    )
    replicas: int | None = Field(default=None, ge=0, description="the count to go to then; unset: hold the count")


class Activation(StrictModel):
    """What wakes a workload at zero replicas, and how long it must be idle before it goes there
    (docs/policy-file.md#scale-to-zero). ``query`` must still have a value when no replica exists: the
    replicas' own metrics have none then."""

    query: str = Field(min_length=1, description="PromQL with a value while no replica exists (the gateway's)")
    threshold: float = Field(default=0.0, ge=0, description="above it, a workload at zero wakes")
    idle_seconds: Duration = Field(
        default=600,
        alias="idleSeconds",
        ge=1,
        le=7 * 86400,
        description="no request at the gateway or in any replica for this long before it goes to zero",
    )


class Slo(StrictModel):
    """The workload's latency objective: ``target`` of requests get their first token within ``ttftSeconds``.
    ``simulate`` judges by it where no ``--slo-*`` flag is given, and its flags fill it in where the file has
    none, so the file ``--write-config`` writes says what it was sized for (docs/policy-file.md#the-slo-block)."""

    ttft_seconds: Seconds = Field(
        alias="ttftSeconds", gt=0, le=3600, description="the time to first token a request should get"
    )
    target: float = Field(default=0.99, gt=0, le=1, description="the share of requests that should get it")
    window_seconds: Duration = Field(
        default=3600,
        alias="windowSeconds",
        ge=60,
        le=30 * 86400,
        description="the window the share is counted over: predictive's errorBudget counts its misses "
        "over it, a day at least; simulate judges the whole trace",
    )


class Capacity(StrictModel):
    """What one replica sustains within the workload's ``slo``: with it, ``metrics`` may be left out and are
    built from it (``capacity_metrics``); with ``learn``, ``predictive`` learns the prompt-token rate online from
    the TTFT histogram (``policies.predictive.capacity``), seeded here. ``simulate`` measures it by a load test and
    ``--write-config`` writes it (docs/policy-file.md#capacity)."""

    prompt_tokens_per_second: float = Field(
        alias="promptTokensPerSecond", gt=0, description="prompt tokens a second one replica prefills within the SLO"
    )
    running_requests: float = Field(
        alias="runningRequests", gt=0, description="requests one replica runs at once within the SLO"
    )
    waiting_requests: float = Field(
        default=2, alias="waitingRequests", gt=0, description="requests waiting per replica: the backlog's target"
    )
    # Off by default: vLLM's TTFT buckets are 1, 2.5 and 5 s around a 2 s SLO, so a minute's p99 is its slowest
    # prompt's prefill, and on the simulator's replicas the learner fell to its bound
    # (docs/decisions/capacity-learner.md).
    learn: bool = Field(
        default=False,
        description="experimental: predictive learns the prompt-token rate from the TTFT histogram, within 0.5 to 2 "
        "times the seed",
    )


def capacity_metrics(capacity: Capacity) -> list[MetricSpec]:
    """The metrics a workload with a ``capacity`` and no ``metrics`` scales on: the prefill load (which waiting
    requests do not show while the batch admits everything), the running batch and the backlog, each per
    replica at what one replica sustains."""
    return [
        MetricSpec.model_validate({"name": name, "target": {"type": TargetType.AVERAGE_VALUE, "value": value}})
        for name, value in (
            ("prompt_tokens_per_second", capacity.prompt_tokens_per_second),
            ("num_requests_running", capacity.running_requests),
            ("num_requests_waiting", capacity.waiting_requests),
        )
    ]
