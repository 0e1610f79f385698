"""The oracle: a lower bound on any policy's GPU-hours for a trace, from the work its requests need."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulations.fleet import group_runs
from simulations.replica_model import ReplicaModel
from simulations.runner import allowed_misses
from simulations.traces import Trace


@dataclass(frozen=True)
class OracleBound:
    gpu_hours: float
    replicas_per_window: np.ndarray
    window_s: float

    @property
    def busiest(self) -> float:
        """The (fractional) fleet its busiest window needs: a fixed fleet must carry it too."""
        return float(self.replicas_per_window.max())

    @property
    def busiest_fleet(self) -> int:
        """The whole replicas its busiest window needs (a float's last digit below a whole number is that number)."""
        return math.ceil(self.busiest - 1e-9)


def oracle_bound(
    trace: Trace, model: ReplicaModel, min_replicas: int, slo_ttft: float, slo_target: float, window_s: float = 60.0
) -> OracleBound:
    """A lower bound on the GPU-hours of any policy whose runs meet ``slo_target``.

    Runs count GPU time from the first arrival to the last (``run``), so the bound counts the same span,
    in windows of ``window_s`` (the last one partial). Every token a replica processes costs
    ``1 / prefill_tokens_per_s`` of compute and every engine step reads the weights once for at most
    ``max_num_seqs`` decoding sequences, so each request costs at least ``ReplicaModel.min_work_s``
    replica-seconds wherever it runs. A policy whose run meets the SLO target fails at most
    ``allowed_misses`` requests, which then owe nothing; for the others, any policy, even one that knows
    the future and starts replicas instantly, must provide in each window:

    1. at least ``minReplicas`` replicas;
    2. the prefill compute of every request whose arrival and SLO deadline (arrival + its prefill on an
       idle replica + ``slo_ttft``) both fall inside the window;
    3. from each window on, the work that requests arriving from that window on must have received by
       the last arrival (work cannot be done before its request arrives): the prefill of each request due
       before then, and all of its work if it must also have finished, which a request that meets the SLO
       does at the latest ``latest_finish_s`` after its deadline (a decoding sequence gets a token every
       engine step, however busy its replica).

    With fractional replicas and no cold start, the least replica time meeting 1-3 for a given set of
    failures is the larger of: the sum of each window's larger of 1 and 2; and, for each window, that
    sum over the windows before it plus all the work owed from it on. The bound takes each of these at
    the failures that lower it most: for the first, the requests whose prefill most lowers the windows
    that 2 decides (a greedy that is exact, since each window's gain shrinks with each failure); for the
    others, the requests that owe the most. Fractional replicas, no cold start, no scheduling loss,
    perfect packing and the most favourable failures only make it smaller than anything a real policy
    can reach, hence a bound.

    With prefix caching, a request's prefill is taken at its least (``PrefixBlocks.least_prefill``: after
    the longest prefix any earlier request had, as from one unbounded cache), and its deadline at its
    latest (its whole prompt's prefill): no replica prefills less, and whatever it prefills, a run that
    meets the SLO for it has done so by then.
    """
    arrival, prompt, output = trace.arrival_s, trace.prompt_tokens.astype(float), trace.output_tokens.astype(float)
    computed = trace.least_prefill_tokens if model.prefix_caching else prompt
    prefill_s = computed / model.prefill_tokens_per_s
    end = float(arrival[-1])
    count = max(1, math.ceil(end / window_s))
    length = np.clip(end - np.arange(count) * window_s, 0.0, window_s)
    k = np.minimum((arrival // window_s).astype(np.int64), count - 1)
    deadline = arrival + model.idle_prefill_s(prompt) + slo_ttft
    due = deadline <= end
    inside = due & ((deadline // window_s).astype(np.int64) == k)
    prefill_in = np.bincount(k[inside], weights=prefill_s[inside], minlength=count)
    finished = due & (deadline + model.latest_finish_s(output) <= end)
    owed = np.where(finished, model.min_work_s(computed, output), np.where(due, prefill_s, 0.0))
    work_in = np.bincount(k, weights=owed, minlength=count)
    least = min_replicas * length
    floor = np.maximum(least, prefill_in)
    may_fail = allowed_misses(trace, slo_target)
    by_window = float(floor.sum()) - _top_sum(
        _prefill_gains(k[inside], prefill_s[inside], prefill_in - least), may_fail
    )
    # For each window j: the floors before it plus the work owed from it on.
    before = np.concatenate([[0.0], np.cumsum(floor)[:-1]])
    from_here = np.cumsum(work_in[::-1])[::-1]
    by_suffix = float((before + from_here).max()) - _top_sum(owed, may_fail)
    total = max(by_window, by_suffix)
    per_window = np.divide(floor, length, out=np.full(count, float(min_replicas)), where=length > 0)
    return OracleBound(total * model.gpus_per_replica / 3600.0, per_window, window_s)


def _top_sum(values: np.ndarray, count: int) -> float:
    """The sum of the ``count`` largest ``values``."""
    if count <= 0 or not len(values):
        return 0.0
    if count >= len(values):
        return float(values.sum())
    return float(np.partition(values, len(values) - count)[len(values) - count :].sum())


def _prefill_gains(window: np.ndarray, prefill_s: np.ndarray, excess: np.ndarray) -> np.ndarray:
    """What failing each request lowers its window's floor by, failing the window's longest prefills
    first: its prefill, up to what is left of the window's excess over ``minReplicas`` (in no particular
    order: only the largest ones are summed)."""
    if not len(window):
        return np.zeros(0)
    order = np.lexsort((-prefill_s, window))
    w, p = window[order], prefill_s[order]
    cumulative = np.cumsum(p)
    first = np.repeat(*group_runs(w))
    done_before = cumulative - p - (cumulative[first] - p[first])  # the window's longer prefills
    gains: np.ndarray = np.clip(np.maximum(excess[w], 0.0) - done_before, 0.0, p)
    return gains
