"""A fleet of simulated vLLM replicas, advanced in fixed time steps.

Each replica does continuous batching: a request waits in the replica's queue until the batch has room
(``max_num_seqs``) and the KV cache can hold its prompt and output (reserved on admission, so there is no
preemption, and the KV-cache usage gauge shows that reservation: it reads 100 % exactly when the replica
can admit nothing more, as vLLM's does when its cache is full); the requests being prefilled share the
prefill throughput equally, and prefill has priority over decode for the replica's time (vLLM's
prefill-first scheduling); the decoding sequences each advance at ``decode_rate(batch)``. The first
token comes when the prefill completes.

Running requests live in flat numpy arrays, so one step costs a handful of vector operations whatever
the fleet size; the fleet owns them (``_admit`` and ``_keep`` make new ones), so a step updates them in
place. Metrics are exposed as Prometheus would see them: gauges and counters scraped every
``scrape_interval_s`` from the replicas that are up.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from policies.histogram import PROMPT_TOKEN_BUCKETS, TTFT_BUCKETS, histogram_quantile, lognormal_spread
from policies.metric_names import PROMPT_SPREAD_WINDOW_S
from simulations.replica_model import ReplicaModel
from simulations.traces import Trace, held_prefix

RATE_WINDOW_S = 60.0
# Prefix-aware routing weighs a replica's cached prefix only against replicas this close to the least
# busy, in waiting requests: the load guard of cache-aware routers (SGLang's balances load first when
# queues differ by more than a threshold), here the built-in workload's backlog target of two a replica.
PREFIX_ROUTING_SLACK = 2


def group_runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of equal values in the sorted, non-empty ``keys`` starts, and how long it is."""
    boundary = np.empty(len(keys), dtype=bool)
    boundary[0] = True
    np.not_equal(keys[1:], keys[:-1], out=boundary[1:])
    starts = np.flatnonzero(boundary)
    sizes = np.empty_like(starts)
    sizes[:-1] = starts[1:] - starts[:-1]
    sizes[-1] = len(keys) - starts[-1]
    return starts, sizes


SMALL_SHARE = 40
"""Up to this many members, ``share_processor`` water-fills in plain Python (``_share_small``): its two
dozen numpy calls on a few prompts cost more than the arithmetic (about a quarter of the Azure hour's
``simulate``, load tests included, went to them); at this size the two take about as long."""


def share_processor(group: np.ndarray, demand: np.ndarray, capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Processor sharing within one step, for many groups at once.

    ``capacity[g]`` units are shared equally among the members of group ``g``; a member that needs less
    than its share finishes and leaves the rest to the others (water-filling). Returns what each member
    receives and, for the members that finish, the fraction of the step at which they do (> 1 otherwise).
    """
    n = len(demand)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    if n == 1:  # one prompt in prefill fleet-wide, the common case of a light load: no sharing to compute
        cap1, need = float(capacity[group[0]]), float(demand[0])
        if need <= cap1 * (1 + 1e-12):
            return np.array([need]), np.array([need / max(cap1, 1e-12)])
        return np.array([cap1]), np.array([2.0])
    cap = capacity[group]
    if np.bincount(group).max() == 1:  # one prompt in prefill per replica: again no sharing to compute
        finishes = demand <= cap * (1 + 1e-12)
        return np.where(finishes, demand, cap), np.where(finishes, demand / np.maximum(cap, 1e-12), 2.0)
    if n <= SMALL_SHARE:
        return _share_small(group.tolist(), demand.tolist(), cap.tolist())
    order = np.lexsort((demand, group))
    d, g = demand[order], group[order]
    starts, sizes = group_runs(g)
    first = np.repeat(starts, sizes)
    rank = np.arange(n) - first
    size = np.repeat(sizes, sizes)
    remaining = size - rank  # members still sharing when this one is reached
    cap = cap[order]
    previous = np.empty(n)
    previous[0] = 0.0
    previous[1:] = d[:-1]
    previous[starts] = 0.0
    # Capacity used by the time member k finishes: every member still present has received d[k].
    spent = np.cumsum((d - previous) * remaining)
    offset = np.repeat(spent[starts] - ((d - previous) * remaining)[starts], sizes)
    spent = spent - offset
    finishes = spent <= cap * (1 + 1e-12)
    # The level reached by those who do not finish: what is left, shared by those left. ``short_at`` is
    # the rank of the group's first member that does not finish (its size if all do); the member before
    # it (index -1 when there is none, masked out) is the last to finish.
    short_at = np.repeat(np.minimum.reduceat(np.where(finishes, size, rank), starts), sizes)
    last_done = first + short_at - 1
    any_done = short_at > 0
    before = np.where(any_done, spent[last_done], 0.0)
    base = np.where(any_done, d[last_done], 0.0)
    level = base + (cap - before) / np.maximum(size - short_at, 1)
    received = np.where(finishes, d, level)
    frac = np.where(finishes, spent / np.maximum(cap, 1e-12), 2.0)
    out_received, out_frac = np.empty(n), np.empty(n)
    out_received[order], out_frac[order] = received, frac
    return out_received, out_frac


def _share_small(group: list[int], demand: list[float], cap: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """``share_processor``'s general case, for ``cap`` given per member, on Python floats: the same
    operations in the same order, so the same results to the bit (its running total runs over all groups
    in order, each group's taken less the total before it, as ``np.cumsum`` and the offset compute it)."""
    n = len(demand)
    order = sorted(range(n), key=lambda i: (group[i], demand[i]))  # stable, as ``np.lexsort``
    received, frac = [0.0] * n, [0.0] * n
    total = 0.0
    k = 0
    while k < n:
        g = group[order[k]]
        end = k
        while end < n and group[order[end]] == g:
            end += 1
        size = end - k
        members = order[k:end]
        spent: list[float] = []
        offset = 0.0
        previous = 0.0
        short_at = size
        for rank, i in enumerate(members):
            step = (demand[i] - previous) * (size - rank)
            total = total + step
            if rank == 0:
                offset = total - step
            spent.append(total - offset)
            previous = demand[i]
            if short_at == size and not spent[rank] <= cap[i] * (1 + 1e-12):
                short_at = rank
        before = spent[short_at - 1] if short_at > 0 else 0.0
        base = demand[members[short_at - 1]] if short_at > 0 else 0.0
        for rank, i in enumerate(members):
            if spent[rank] <= cap[i] * (1 + 1e-12):
                received[i], frac[i] = demand[i], spent[rank] / max(cap[i], 1e-12)
            else:
                received[i], frac[i] = base + (cap[i] - before) / max(size - short_at, 1), 2.0
        k = end
    return np.array(received), np.array(frac)


@dataclass
class Replica:
    index: int
    created_at: float
    ready_at: float
    draining_since: float | None = None
    removed_at: float | None = None
    waiting: deque[int] = field(default_factory=deque)
    running: int = 0
    kv_reserved: float = 0.0
    # Prefix caching: the keys of the prompt blocks this replica holds, least recently used first.
    blocks: OrderedDict[int, None] = field(default_factory=OrderedDict)

    def ready(self, now: float) -> bool:
        return self.removed_at is None and self.ready_at <= now

    @property
    def in_flight(self) -> int:
        return self.running + len(self.waiting)


@dataclass(frozen=True)
class Scrape:
    """What Prometheus holds after one scrape of every replica that is up."""

    at: float
    up: int
    waiting: float
    running: float
    kv_max: float
    prompt_tokens_total: float
    generation_tokens_total: float
    per_pod_waiting: tuple[float, ...]
    # ``vllm:time_to_first_token_seconds_bucket`` summed over every replica: cumulative counts of first tokens
    # at or below each of ``TTFT_BUCKETS``, then ``+Inf`` (all of them, the histogram's ``_count``); and its ``_sum``.
    ttft_buckets: tuple[float, ...] = ()
    ttft_sum: float = 0.0

    @property
    def ttft_count(self) -> float:
        """The histogram's ``_count``: every first token so far (its ``+Inf`` bucket)."""
        return self.ttft_buckets[-1] if self.ttft_buckets else 0.0


class Fleet:
    def __init__(self, model: ReplicaModel, trace: Trace, initial_replicas: int) -> None:
        self.model = model
        self.trace = trace
        n = trace.requests
        self.arrival = trace.arrival_s
        self.prompt = trace.prompt_tokens.astype(np.float64)
        self.output = trace.output_tokens.astype(np.float64)
        # The KV cache a request reserves on admission: its prompt and output, at most the whole cache.
        self.footprint = np.minimum(self.prompt + self.output, model.kv_cache_tokens)
        # The prompt tokens each request prefills: all of them, less a prefix its replica holds (set on
        # admission).
        self.computed = self.prompt.copy()
        self.prefix = trace.prefix if model.prefix_caching else None
        self.cache_blocks = int(model.kv_cache_tokens // self.prefix.block_tokens) if self.prefix else 0
        self.first_token = np.full(n, np.nan)
        self.admitted = np.full(n, np.nan)
        self.finished = np.full(n, np.nan)
        self.dropped = np.zeros(n, dtype=bool)
        self.next_arrival = 0
        self.router_queue: deque[int] = deque()
        self.replicas: list[Replica] = []  # every replica ever created; index = position
        self.live: list[Replica] = []  # those not removed yet
        self.round_robin = 0
        # Running requests, one entry each.
        self.r_rep = np.zeros(0, dtype=np.int64)
        self.r_req = np.zeros(0, dtype=np.int64)
        self.r_pre = np.zeros(0)
        self.r_dec = np.zeros(0)
        self.r_start = np.zeros(0)
        # Each running request's tokens in a step without prefill: set by the first such step of a batch,
        # kept until a request is admitted or leaves (``_admit``, ``_keep``).
        self.r_tokens_per_step: np.ndarray | None = None
        self.prompt_tokens_total = 0.0
        self.generation_tokens_total = 0.0
        self.ttft_counts = np.zeros(len(TTFT_BUCKETS) + 1)  # first tokens per bucket, not cumulative
        self.ttft_sum = 0.0  # the histogram's ``_sum``: every time to first token so far, added up
        # ``vllm:request_prompt_tokens``, counted as each first token comes (vLLM counts a request as it finishes:
        # over the hour it is read over, the two differ by the requests in flight); and its scrapes of the last hour.
        self.prompt_counts = np.zeros(len(PROMPT_TOKEN_BUCKETS) + 1)
        self.prompt_scrapes: deque[tuple[float, np.ndarray]] = deque()
        self.replica_seconds = 0.0
        self.left = 0  # requests finished or dropped: the gateway holds ``next_arrival - left`` open
        self.scrapes: deque[Scrape] = deque()
        self.last_scrape_at = -math.inf
        for _ in range(initial_replicas):
            self._create(0.0, 0.0)

    # -- the cluster side -------------------------------------------------------------------------

    def _create(self, now: float, ready_at: float) -> None:
        replica = Replica(len(self.replicas), now, ready_at)
        self.replicas.append(replica)
        self.live.append(replica)

    def _remove(self, replica: Replica, at: float) -> None:
        replica.removed_at = at
        self.live.remove(replica)

    def active(self) -> list[Replica]:
        """Replicas that count toward ``spec.replicas``: ready or starting, not draining."""
        return [r for r in self.live if r.draining_since is None]

    @property
    def spec_replicas(self) -> int:
        return len(self.active())

    def ready_replicas(self, now: float) -> int:
        return sum(1 for r in self.active() if r.ready(now))

    @property
    def existing(self) -> int:
        return len(self.live)

    def scale_to(self, target: int, now: float) -> None:
        active = self.active()
        if target > len(active):
            for _ in range(target - len(active)):
                self._create(now, now + self.model.cold_start_s)
            return
        # Like a ReplicaSet: starting pods go first (newest first), then the least busy ready ones.
        victims = sorted(active, key=lambda r: (r.ready(now), r.in_flight, -r.created_at))[: len(active) - target]
        for replica in victims:
            if not replica.ready(now) or not self.model.drain:
                self._abort(replica, now)
            else:
                replica.draining_since = now

    def _abort(self, replica: Replica, now: float) -> None:
        mine = self.r_rep == replica.index
        if mine.any():
            self.dropped[self.r_req[mine]] = True
            self.left += int(mine.sum())
            self._keep(~mine)
        for req in replica.waiting:
            self.dropped[req] = True
        self.left += len(replica.waiting)
        replica.waiting.clear()
        replica.running = 0
        replica.kv_reserved = 0.0
        self._remove(replica, now)

    def _keep(self, mask: np.ndarray) -> None:
        self.r_tokens_per_step = None
        self.r_rep, self.r_req = self.r_rep[mask], self.r_req[mask]
        self.r_pre, self.r_dec, self.r_start = self.r_pre[mask], self.r_dec[mask], self.r_start[mask]

    # -- requests ---------------------------------------------------------------------------------

    def _route(self, reqs: list[int], candidates: list[Replica]) -> None:
        """Send requests, in order, to the replicas that take traffic (there is at least one).

        Least-waiting routing picks, for each request, the replica with the fewest waiting, then the least
        KV reserved, then the fewest running, the first such in ``candidates``; only the waiting counts
        change while a step's arrivals are routed (admission comes after), so the keys are built once, in
        a heap.
        """
        if not reqs:
            return
        if self.model.routing == "round-robin":
            for req in reqs:
                candidates[self.round_robin % len(candidates)].waiting.append(req)
                self.round_robin += 1
            return
        if self.model.routing == "prefix-aware" and self.prefix is not None:
            self._route_by_prefix(reqs, candidates)
            return
        heap = [(len(r.waiting), r.kv_reserved, r.running, i) for i, r in enumerate(candidates)]
        heapq.heapify(heap)
        for req in reqs:
            waiting, kv, running, i = heap[0]
            candidates[i].waiting.append(req)
            heapq.heapreplace(heap, (waiting + 1, kv, running, i))

    def _route_by_prefix(self, reqs: list[int], candidates: list[Replica]) -> None:
        """Prefix-aware routing: each request goes to the replica that holds the longest prefix of its
        prompt, among those with at most ``PREFIX_ROUTING_SLACK`` more waiting than the least (so that a
        popular prefix cannot pile its requests onto one replica); ties go as in least-waiting routing."""
        assert self.prefix is not None
        waiting = [len(r.waiting) for r in candidates]
        for req in reqs:
            keys = self.prefix.keys(req)
            within = min(waiting) + PREFIX_ROUTING_SLACK
            best = min(
                (i for i in range(len(candidates)) if waiting[i] <= within),
                key=lambda i: (
                    -held_prefix(candidates[i].blocks, keys),
                    waiting[i],
                    candidates[i].kv_reserved,
                    candidates[i].running,
                    i,
                ),
            )
            candidates[best].waiting.append(req)
            waiting[best] += 1

    def _admit(self, now: float) -> None:
        cap, max_seqs, footprint = self.model.kv_cache_tokens, self.model.max_num_seqs, self.footprint
        reps: list[int] = []
        reqs: list[int] = []
        for replica in self.live:
            if not replica.waiting or replica.ready_at > now:
                continue
            while replica.waiting and replica.running < max_seqs:
                req = replica.waiting[0]
                need = footprint[req]
                if replica.running and replica.kv_reserved + need > cap:
                    break
                replica.waiting.popleft()
                replica.running += 1
                replica.kv_reserved += need
                reps.append(replica.index)
                reqs.append(req)
        if not reqs:
            return
        if self.prefix is not None:
            for rep, req in zip(reps, reqs, strict=True):
                cached = self._reuse_prefix(self.replicas[rep], req)
                self.computed[req] = max(self.prompt[req] - cached, 1.0)
                # vLLM counts a prompt's cached tokens among its prompt tokens.
                self.prompt_tokens_total += self.prompt[req] - self.computed[req]
        idx = np.asarray(reqs, dtype=np.int64)
        # A request that arrives inside the step is admitted on arrival, not at the step's start.
        start = np.maximum(self.arrival[idx], now)
        self.admitted[idx] = start
        self.r_tokens_per_step = None
        self.r_rep = np.concatenate([self.r_rep, np.asarray(reps, dtype=np.int64)])
        self.r_req = np.concatenate([self.r_req, idx])
        self.r_pre = np.concatenate([self.r_pre, self.computed[idx]])
        self.r_dec = np.concatenate([self.r_dec, self.output[idx] - 1.0])
        self.r_start = np.concatenate([self.r_start, start])

    def _reuse_prefix(self, replica: Replica, req: int) -> float:
        """The prompt tokens of ``req`` that ``replica`` holds from earlier prompts (the longest prefix of
        its blocks in the cache); all its blocks are then held, the first the most recently used, so that
        the cache gives up a prompt's tail before its head, as vLLM's does."""
        assert self.prefix is not None
        keys = self.prefix.keys(req)
        cache = replica.blocks
        hit = held_prefix(cache, keys)
        for key in reversed(keys):
            cache[key] = None
            cache.move_to_end(key)
        while len(cache) > self.cache_blocks:
            cache.popitem(last=False)
        return float(hit * self.prefix.block_tokens)

    def step(self, now: float) -> None:
        """Advance from ``now`` to ``now + step_s``."""
        dt, model = self.model.step_s, self.model
        end = now + dt
        if self._only_decoding(end):  # what the rest would do, without its calls that find nothing to do
            self.replica_seconds += self.existing * dt
            if len(self.r_req):
                self._decode_all(end)
            return
        candidates = [r for r in self.live if r.draining_since is None and r.ready_at <= now]
        arrived = int(np.searchsorted(self.arrival, end, side="left"))
        if candidates:
            self._route([*self.router_queue, *range(self.next_arrival, arrived)], candidates)
            self.router_queue.clear()
        else:
            self.router_queue.extend(range(self.next_arrival, arrived))
        self.next_arrival = arrived
        self._admit(now)
        self.replica_seconds += self.existing * dt
        if len(self.r_req):
            self._advance(now, dt, end)
        for replica in list(self.live):
            if replica.draining_since is None:
                continue
            if replica.in_flight == 0:
                self._remove(replica, end)
            elif end - replica.draining_since >= model.drain_timeout_s:
                self._abort(replica, end)
        if self._scrape_due(end):
            self._scrape(end)

    def _scrape_due(self, end: float) -> bool:
        return end - self.last_scrape_at >= self.model.scrape_interval_s - 1e-9

    def _only_decoding(self, end: float) -> bool:
        """Whether this step only decodes: no request arrives, waits or is in prefill, no replica drains,
        no scrape is due. Most steps of a sparse trace are such (70 % at 0.14 requests/s)."""
        if self.router_queue or self._scrape_due(end):
            return False
        if self.next_arrival < len(self.arrival) and self.arrival[self.next_arrival] < end:
            return False
        for replica in self.live:
            if replica.waiting or replica.draining_since is not None:
                return False
        return not (self.r_pre > 0).any()

    def _advance(self, now: float, dt: float, end: float) -> None:
        """One step of every replica's engine: ``iterations`` engine steps, each reading the weights once
        and computing one token per decoding sequence plus a chunk of pending prefill."""
        prefilling = self.r_pre > 0
        idx_p = np.flatnonzero(prefilling)
        if not len(idx_p):  # most steps of a light load: no prefill, so every engine step is a decode
            self._decode_all(end)
            return
        if len(idx_p) == 1:
            self._prefill_alone(now, dt, end, int(idx_p[0]), prefilling)
        else:
            self._prefill_shared(now, dt, end, idx_p, prefilling)

    def _prefill_shared(self, now: float, dt: float, end: float, idx_p: np.ndarray, prefilling: np.ndarray) -> None:
        """The requests ``idx_p`` in prefill share their replicas' prefill throughput; every replica
        decodes in the engine steps this leaves."""
        model = self.model
        size = len(self.replicas)
        flops, weights, budget = model.prefill_tokens_per_s, model.weight_read_s, float(model.max_num_batched_tokens)
        # Only the requests in prefill (``_p``) take part until the decode.
        rep_p, pre_p = self.r_rep[idx_p], self.r_pre[idx_p]
        # The part of this step during which each request has been here (arrivals inside the step).
        avail = np.minimum((end - self.r_start[idx_p]) / dt, 1.0)
        pending = np.bincount(rep_p, weights=pre_p, minlength=size)
        batch = np.bincount(self.r_rep[~prefilling], minlength=size).astype(float)
        room = np.maximum(budget - batch, 0.0)
        # Either all pending prefill fits in this step beside the decodes, or every engine step is full.
        pending_s = pending / flops
        it_all = np.maximum(dt - pending_s, 0.0) / (weights + batch / flops)
        fits = (pending_s < dt) & (pending <= it_all * room + 1e-9)
        it_full = dt / (
            weights + np.minimum(batch + np.where(pending > 0, room, 0.0), np.maximum(budget, batch)) / flops
        )
        iterations = np.where(fits, it_all, it_full)
        prefill_tokens = np.where(fits, pending, np.minimum(iterations * room, pending))
        # Prefill runs at the full-step rate while it lasts; when it all fits it simply ends early.
        rate = np.where(fits, np.maximum(prefill_tokens, it_full * room), prefill_tokens)
        # A request that arrived inside the step can use at most its part of the step.
        demand = np.minimum(pre_p, avail * rate[rep_p] + 1e-9 * (avail >= 1))
        received, finish_frac = share_processor(rep_p, demand, rate)
        used_p = np.minimum(received, pre_p)
        left_p = pre_p - used_p
        self.prompt_tokens_total += float(used_p.sum())
        self.r_pre[idx_p] = left_p
        finished = np.zeros(len(self.r_pre), dtype=bool)
        done_p = left_p <= 1e-9
        if done_p.any():
            done = idx_p[done_p]
            reqs = self.r_req[done]
            at = np.maximum(
                now + np.minimum(finish_frac[done_p], 1.0) * dt,
                self.r_start[done] + model.idle_prefill_s(self.computed[reqs]),
            )
            self.first_token[reqs] = at
            ttft = at - self.arrival[reqs]
            self.ttft_counts += np.bincount(np.searchsorted(TTFT_BUCKETS, ttft), minlength=len(self.ttft_counts))
            lengths = np.searchsorted(PROMPT_TOKEN_BUCKETS, self.prompt[reqs])
            self.prompt_counts += np.bincount(lengths, minlength=len(self.prompt_counts))
            self.ttft_sum += float(ttft.sum())
            self.generation_tokens_total += float(len(done))
            finished[done] = self.r_dec[done] <= 1e-9
        self._decode(end, iterations, ~prefilling, finished)

    def _prefill_alone(self, now: float, dt: float, end: float, i: int, prefilling: np.ndarray) -> None:
        """``_advance`` when request ``i`` alone is in prefill fleet-wide, most prefill steps of a light
        load: the same arithmetic, on floats, for its replica; every other replica's engine steps are
        those of a step without prefill (with nothing pending, all of the step is theirs)."""
        model = self.model
        flops, weights, budget = model.prefill_tokens_per_s, model.weight_read_s, float(model.max_num_batched_tokens)
        replica, pre, start = int(self.r_rep[i]), float(self.r_pre[i]), float(self.r_start[i])
        batch = np.bincount(self.r_rep, minlength=len(self.replicas)).astype(float)
        decoding_here = float(batch[replica] - 1.0)
        room = max(budget - decoding_here, 0.0)
        pending_s = pre / flops
        it_all = max(dt - pending_s, 0.0) / (weights + decoding_here / flops)
        fits = pending_s < dt and pre <= it_all * room + 1e-9
        it_full = dt / (weights + min(decoding_here + room, max(budget, decoding_here)) / flops)
        iterations = self._decode_iterations(batch)
        iterations[replica] = it_all if fits else it_full
        prefill_tokens = pre if fits else min(iterations[replica] * room, pre)
        rate = max(prefill_tokens, it_full * room) if fits else prefill_tokens
        avail = min((end - start) / dt, 1.0)
        demand = min(pre, avail * rate + 1e-9 * (avail >= 1))
        if demand <= rate * (1 + 1e-12):  # ``share_processor`` for one member
            used, finish_frac = min(demand, pre), demand / max(rate, 1e-12)
        else:
            used, finish_frac = min(rate, pre), 2.0
        left = pre - used
        self.prompt_tokens_total += used
        self.r_pre[i] = left
        finished = np.zeros(len(self.r_pre), dtype=bool)
        if left <= 1e-9:
            req = int(self.r_req[i])
            at = max(now + min(finish_frac, 1.0) * dt, start + float(model.idle_prefill_s(self.computed[req])))
            self.first_token[req] = at
            ttft_one = at - float(self.arrival[req])
            self.ttft_counts[bisect.bisect_left(TTFT_BUCKETS, ttft_one)] += 1
            self.prompt_counts[bisect.bisect_left(PROMPT_TOKEN_BUCKETS, float(self.prompt[req]))] += 1
            self.ttft_sum += ttft_one
            self.generation_tokens_total += 1.0
            finished[i] = self.r_dec[i] <= 1e-9
        self._decode(end, iterations, ~prefilling, finished)

    def _decode_all(self, end: float) -> None:
        """``_decode`` of a step without prefill, where every running request decodes: its tokens per step
        depend only on its replica's batch, so they are worked out once per batch."""
        if self.r_tokens_per_step is None:
            batch = np.bincount(self.r_rep, minlength=len(self.replicas))
            self.r_tokens_per_step = self._decode_iterations(batch)[self.r_rep]
        tokens = np.minimum(self.r_tokens_per_step, self.r_dec)
        self.generation_tokens_total += float(tokens.sum())
        self.r_dec -= tokens
        finished = self.r_dec <= 1e-9
        if finished.any():
            self._leave(finished, end)

    def _decode_iterations(self, batch: np.ndarray) -> np.ndarray:
        """The engine steps in one step of replicas with nothing to prefill, by how many sequences each
        decodes: one weight read and one token per sequence each."""
        model = self.model
        iterations: np.ndarray = model.step_s / (model.weight_read_s + batch / model.prefill_tokens_per_s)
        return iterations

    def _decode(self, end: float, iterations: np.ndarray, decoding: np.ndarray, finished: np.ndarray) -> None:
        """A token for each ``decoding`` request per engine step of its replica (``iterations``), then the
        requests that are done (``finished`` already, or out of tokens) leave at ``end``."""
        if decoding.any():
            step_tokens = np.minimum(iterations[self.r_rep[decoding]], self.r_dec[decoding])
            self.generation_tokens_total += float(step_tokens.sum())
            self.r_dec[decoding] -= step_tokens
            finished = finished | (decoding & (self.r_dec <= 1e-9))
        if finished.any():
            self._leave(finished, end)

    def _leave(self, finished: np.ndarray, end: float) -> None:
        """The ``finished`` requests free their replicas' batch slots and KV cache at ``end``."""
        done = self.r_req[finished]
        self.finished[done] = end
        self.left += len(done)
        for rep, kv in zip(self.r_rep[finished].tolist(), self.footprint[done].tolist(), strict=True):
            replica = self.replicas[rep]
            replica.running -= 1
            replica.kv_reserved -= kv
        self._keep(~finished)

    # -- what Prometheus sees ---------------------------------------------------------------------

    def _scrape(self, now: float) -> None:
        up = [r for r in self.live if r.ready_at <= now]
        waiting = tuple(float(len(r.waiting)) for r in up)
        scrape = Scrape(
            at=now,
            up=len(up),
            waiting=float(sum(waiting)),
            running=float(sum(r.running for r in up)),
            kv_max=max((r.kv_reserved / self.model.kv_cache_tokens for r in up), default=math.nan),
            prompt_tokens_total=self.prompt_tokens_total,
            generation_tokens_total=self.generation_tokens_total,
            per_pod_waiting=waiting,
            ttft_buckets=tuple(np.cumsum(self.ttft_counts).tolist()),
            ttft_sum=self.ttft_sum,
        )
        self.scrapes.append(scrape)
        self.last_scrape_at = now
        while self.scrapes and self.scrapes[0].at < now - max(RATE_WINDOW_S, self.model.staleness_s) - 1:
            self.scrapes.popleft()
        if up:
            self.prompt_scrapes.append((now, np.cumsum(self.prompt_counts)))
        while self.prompt_scrapes and self.prompt_scrapes[0][0] < now - PROMPT_SPREAD_WINDOW_S:
            self.prompt_scrapes.popleft()

    def latest_scrape(self, now: float) -> Scrape | None:
        if not self.scrapes or self.scrapes[-1].at < now - self.model.staleness_s:
            return None
        return self.scrapes[-1]

    def window(self, now: float) -> tuple[Scrape, Scrape] | None:
        """The first and the last scrape of the last ``RATE_WINDOW_S``, what ``rate(...[1m])`` reads."""
        window = [s for s in self.scrapes if now - RATE_WINDOW_S <= s.at <= now]
        return (window[0], window[-1]) if len(window) >= 2 else None

    def rate(self, attr: str, now: float) -> float | None:
        """``rate(counter[1m])`` from the scrapes of the last minute."""
        if (ends := self.window(now)) is None:
            return None
        first, last = ends
        return float(getattr(last, attr) - getattr(first, attr)) / (last.at - first.at)

    def ttft_quantile(self, q: float, now: float) -> float | None:
        """``histogram_quantile(q, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))``: NaN where
        no first token came in the window, as Prometheus gives."""
        if (ends := self.window(now)) is None:
            return None
        first, last = ends
        edges = (*TTFT_BUCKETS, math.inf)
        increase = {edge: b - a for edge, a, b in zip(edges, first.ttft_buckets, last.ttft_buckets, strict=True)}
        return histogram_quantile(q, increase)

    def prompt_spread(self, now: float) -> float | None:
        """``histogram.lognormal_spread`` of ``sum by (le) (rate(vllm:request_prompt_tokens_bucket[1h]))``: the
        spread of the last hour's prompt lengths; ``None`` before two scrapes or without a prompt in the hour."""
        window = [(at, counts) for at, counts in self.prompt_scrapes if now - PROMPT_SPREAD_WINDOW_S <= at <= now]
        if len(window) < 2:
            return None
        edges = (*PROMPT_TOKEN_BUCKETS, math.inf)
        increase = window[-1][1] - window[0][1]
        return lognormal_spread({edge: float(count) for edge, count in zip(edges, increase, strict=True)})

    @property
    def gateway_open(self) -> int:
        """The requests the gateway holds open for the model: arrived, not yet finished or dropped (queued
        at the gateway while no replica is ready, or being served)."""
        return self.next_arrival - self.left

    @property
    def done(self) -> bool:
        return (
            self.next_arrival >= len(self.arrival)
            and not len(self.r_req)
            and not self.router_queue
            and all(not r.waiting for r in self.live)
        )
