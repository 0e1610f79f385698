"""Pure decision code: policies turn observations into replica proposals; ``behavior`` normalizes them.

Nothing here performs I/O or reads the clock: time is always an argument.
"""

from policies.base import Observation, Policy, Proposal, WorkloadContext
from policies.pipeline import Decision, Reason, WorkloadDecider

__all__ = ["Decision", "Observation", "Policy", "Proposal", "Reason", "WorkloadContext", "WorkloadDecider"]
