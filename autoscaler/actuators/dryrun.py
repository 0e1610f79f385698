"""The dry-run actuator: reads the cluster for real, and never sends a write of any kind."""

from __future__ import annotations

from autoscaler.actuators.base import Actuator, ActuatorError, Ownership, ScaleState, WriteResult
from autoscaler.logs import get_logger
from policies.policy_file import TargetRef

log = get_logger("autoscaler.actuator")


class DryRunActuator:
    dry_run = True

    def __init__(self, reader: Actuator) -> None:
        self.reader = reader

    def read(self, target: TargetRef) -> ScaleState:
        return self.reader.read(target)

    def read_many(self, targets: list[TargetRef]) -> dict[tuple[str, str, str], ScaleState | ActuatorError]:
        return self.reader.read_many(targets)

    def scale(self, target: TargetRef, state: ScaleState, replicas: int) -> WriteResult:
        return WriteResult(False, "dry-run", f"would scale from {state.replicas} to {replicas}")

    def claim(self, target: TargetRef, state: ScaleState, claimant: str) -> WriteResult:
        return WriteResult(False, "dry-run", f"would claim for {claimant}")

    def release(self, target: TargetRef, claimant: str) -> WriteResult:
        return WriteResult(False, "dry-run", f"would release {claimant}'s claim")

    def owners(self, target: TargetRef, fresh: bool = False) -> Ownership:
        return self.reader.owners(target, fresh)

    def event(self, target: TargetRef, kind: str, reason: str, message: str) -> None:
        log.info(
            "would-record-event",
            workload=f"{target.namespace}/{target.name}",
            type=kind,
            reason=reason,
            message=message,
        )
