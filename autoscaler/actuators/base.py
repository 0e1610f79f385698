"""What an actuator reads and writes, and the interface both implementations share."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from policies.policy_file import TargetRef

PAUSED = "vllm-autoscaler.io/paused"
PAUSED_REPLICAS = "vllm-autoscaler.io/paused-replicas"
# Which install of this controller scales the target: taken before its first write, released when the
# workload leaves that install's policy file; another install leaves a claimed target alone.
CLAIMED_BY = "vllm-autoscaler.io/claimed-by"


class ReadFailure(StrEnum):
    NOT_FOUND = "not-found"
    FORBIDDEN = "forbidden"
    UNAVAILABLE = "unavailable"


class ActuatorError(Exception):
    def __init__(self, failure: ReadFailure, detail: str) -> None:
        super().__init__(f"{failure}: {detail}")
        self.failure = failure
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ScaleState:
    """A target as read this tick."""

    replicas: int
    ready: int
    resource_version: str
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteResult:
    applied: bool
    outcome: str  # applied, dry-run, changed-concurrently, conflict, forbidden, not-found, unavailable
    detail: str = ""
    attempts: int = 0
    resource_version: str = ""  # the object's version after a write that changed it, where known


@dataclass(frozen=True)
class Owner:
    """Another autoscaler that targets the same object, with its own counts where it publishes them (an HPA's
    ``status.currentReplicas`` and ``desiredReplicas``), for shadow mode to log beside its own."""

    what: str  # "HorizontalPodAutoscaler vllm-hpa"
    current: int | None = None
    desired: int | None = None


@dataclass(frozen=True)
class Ownership:
    """Who else scales a target. ``unknown`` says why the check could not complete (a list refused, failed or
    dropped): then nobody can say the target is free, and nothing is written to it."""

    owners: tuple[Owner, ...] = ()
    unknown: tuple[str, ...] = ()


def target_key(target: TargetRef) -> tuple[str, str, str]:
    return (target.kind, target.namespace, target.name)


class Actuator(Protocol):
    dry_run: bool

    def read(self, target: TargetRef) -> ScaleState:
        """The target's replica count, ready count and annotations; raises :class:`ActuatorError`."""
        ...

    def read_many(self, targets: list[TargetRef]) -> dict[tuple[str, str, str], ScaleState | ActuatorError]:
        """Every target's state, keyed by ``(kind, namespace, name)``, in as few requests as possible."""
        ...

    def scale(self, target: TargetRef, state: ScaleState, replicas: int) -> WriteResult:
        """Set ``spec.replicas`` through the scale subresource, only if nobody changed it since ``state``."""
        ...

    def claim(self, target: TargetRef, state: ScaleState, claimant: str) -> WriteResult:
        """Annotate the target ``CLAIMED_BY: claimant``, only if it is still as read in ``state``."""
        ...

    def release(self, target: TargetRef, claimant: str) -> WriteResult:
        """Remove the claim, only if it is still ``claimant``'s."""
        ...

    def owners(self, target: TargetRef, fresh: bool = False) -> Ownership:
        """Other autoscalers (HPAs, KEDA ScaledObjects, AIBrix PodAutoscalers) that target the same object;
        ``fresh``: listed now, not from a cache (the check just before a write)."""
        ...

    def event(self, target: TargetRef, kind: str, reason: str, message: str) -> None:
        """Record a Kubernetes Event on the target, best effort."""
        ...
