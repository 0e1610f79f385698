"""A fleet of simulated vLLM replicas, advanced in fixed time steps.

Each replica does continuous batching as vLLM V1's scheduler does (``replica_model`` gives the cost of an
engine step): a request reaches its replica's queue ``request_overhead_s`` after it arrives and is admitted
while the batch has room (``max_num_seqs``) and the KV cache has free blocks for its prompt; the admitted
prompts are prefilled first come, first served within each engine step's token budget, beside one token
for every decoding sequence; a sequence's cache grows a block at a time as it decodes, and when the cache
runs out the newest running request is preempted: its blocks are freed and it waits at the head of the
queue to be prefilled again, prompt and generated tokens together. The first token comes when the engine step
that completes the prefill ends. The KV-cache usage gauge shows the blocks in use.

Running requests live in preallocated columns (``engine.RunningColumns``), in their order of admission on each
replica, which compiled passes update in place: a step's admissions are written into them (``engine.admit``), its
engine steps advance them (``engine.engine_step``), its first tokens and finished requests are recorded
(``engine.settle``) and those that leave compacted away (``engine.compact``). Metrics are exposed as Prometheus
would see them: gauges and counters scraped every ``scrape_interval_s`` from the replicas that are up.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from policies.histogram import PROMPT_TOKEN_BUCKETS, TTFT_BUCKETS, count_above, histogram_quantile, lognormal_spread
from policies.metric_names import PROMPT_SPREAD_WINDOW_S
from simulations.engine import RUNNING_CAPACITY, RunningColumns, admit, compact, engine_step, settle
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


def _bucketed(counts: np.ndarray, pending: list[np.ndarray], edges: tuple[float, ...]) -> np.ndarray:
    """``counts`` (per bucket of ``edges``, then ``+Inf``) with the ``pending`` values counted in, and emptied:
    a histogram whose observations are bucketed when it is read, not as each step makes them."""
    if pending:
        values = np.concatenate(pending)
        counts += np.bincount(np.searchsorted(edges, values), minlength=len(counts))
        pending.clear()
    return counts


@dataclass
class Replica:
    index: int
    created_at: float
    ready_at: float
    draining_since: float | None = None
    removed_at: float | None = None
    waiting: deque[int] = field(default_factory=deque)
    running: int = 0
    preemptions: int = 0  # ``vllm:num_preemptions_total``
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
        # What ``engine.engine_step`` is told of the replica (the model is frozen): read once, not every step.
        self._engine = (
            model.weight_read_s, model.kv_read_s_per_token, model.prefill_tokens_per_s,
            float(model.max_num_batched_tokens), float(model.kv_block_tokens),
        )  # fmt: skip
        n = trace.requests
        self.arrival = trace.arrival_s
        # The engine sees a request ``request_overhead_s`` after it arrives (HTTP, tokenisation, scheduling).
        self.engine_arrival = self.arrival + model.request_overhead_s
        self.prompt = trace.prompt_tokens.astype(np.float64)
        self.output = trace.output_tokens.astype(np.float64)
        # The prompt tokens each request prefills: all of them, less a prefix its replica holds (set on
        # admission). What the SLO judges a request's own prefill by.
        self.computed = self.prompt.copy()
        # What a request holds in the KV cache once prefilled, and the tokens it prefills and decodes when
        # admitted: its prompt, prefilled in full and decoded to the end, until it is preempted; then its
        # prompt and the tokens generated so far, all prefilled again, and what is left to decode.
        self.context = self.prompt.copy()
        self.to_prefill = self.prompt.copy()
        self.to_decode = self.output - 1.0
        self.preempted = np.zeros(n, dtype=bool)
        self.preemptions = 0
        self.prefix = trace.prefix if model.prefix_caching else None
        self.cache_blocks = int(model.kv_cache_tokens // self.prefix.block_tokens) if self.prefix else 0
        self.first_token = np.full(n, np.nan)
        self.admitted = np.full(n, np.nan)
        self.finished = np.full(n, np.nan)
        self.dropped = np.zeros(n, dtype=bool)
        self.served_by = np.full(n, -1, dtype=np.int64)  # the replica (index) that admitted each request
        self.next_arrival = 0
        self.router_queue: deque[int] = deque()
        self.replicas: list[Replica] = []  # every replica ever created; index = position
        self.live: list[Replica] = []  # those not removed yet
        self.round_robin = 0
        # Running requests, one entry each, in their order of admission on each replica: ``n_running`` of them, the
        # first ``n_running`` entries of columns that grow by doubling (``r_rep`` and the others are those entries).
        self.n_running = 0
        self._columns = RunningColumns.empty(RUNNING_CAPACITY)
        self._view()
        self.step_end = np.zeros(0)  # when each replica's engine step under way ends (by index)
        self._kv: np.ndarray | None = None  # ``kv_used()`` until the running requests or their contexts change
        self.prompt_tokens_total = 0.0
        self.generation_tokens_total = 0.0
        # ``vllm:time_to_first_token_seconds``: first tokens per bucket, not cumulative (``ttft_counts``), the
        # times to first token not counted in yet (bucketed when read: a scrape's work, not every step's)
        self._ttft_counts = np.zeros(len(TTFT_BUCKETS) + 1)
        self._ttfts: list[np.ndarray] = []
        self.ttft_sum = 0.0  # the histogram's ``_sum``: every time to first token so far, added up
        # ``vllm:request_prompt_tokens``, counted as each request finishes, as vLLM counts it; and its scrapes of the
        # last hour.
        self._prompt_counts = np.zeros(len(PROMPT_TOKEN_BUCKETS) + 1)
        self._finished_prompts: list[np.ndarray] = []  # the prompt lengths of requests finished, not counted in yet
        self.prompt_scrapes: deque[tuple[float, np.ndarray]] = deque()
        self.replica_seconds = 0.0
        self.left = 0  # requests finished or dropped: the gateway holds ``next_arrival - left`` open
        self.scrapes: deque[Scrape] = deque()
        self.last_scrape_at = -math.inf
        for _ in range(initial_replicas):
            self._create(0.0, 0.0)

    def release(self, req: int, at: float) -> None:
        """A closed-loop client sends request ``req`` at ``at``: its arrival was left unknown (``inf``) in
        the trace until now. Requests are released in order, so arrivals stay sorted."""
        self.arrival[req] = at
        self.engine_arrival[req] = at + self.model.request_overhead_s

    @property
    def ttft_counts(self) -> np.ndarray:
        """First tokens so far by ``TTFT_BUCKETS`` bucket (then ``+Inf``), not cumulative."""
        return _bucketed(self._ttft_counts, self._ttfts, TTFT_BUCKETS)

    @property
    def prompt_counts(self) -> np.ndarray:
        """Finished requests so far by ``PROMPT_TOKEN_BUCKETS`` bucket of their prompt (then ``+Inf``)."""
        return _bucketed(self._prompt_counts, self._finished_prompts, PROMPT_TOKEN_BUCKETS)

    # -- the cluster side -------------------------------------------------------------------------

    def _create(self, now: float, ready_at: float) -> None:
        replica = Replica(len(self.replicas), now, ready_at)
        self.replicas.append(replica)
        self.step_end = np.append(self.step_end, -math.inf)
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
            self._drop(mine)
        for req in replica.waiting:
            self.dropped[req] = True
        self.left += len(replica.waiting)
        replica.waiting.clear()
        replica.running = 0
        self._remove(replica, now)

    def _view(self) -> None:
        """``r_rep`` and the others: the running requests' entries of the columns (views, updated in place)."""
        n, c = self.n_running, self._columns
        self.r_rep, self.r_req, self.r_pre, self.r_dec = c.rep[:n], c.req[:n], c.pre[:n], c.dec[:n]
        self.r_start, self.r_ctx, self.r_chunk = c.start[:n], c.ctx[:n], c.chunk[:n]

    def _drop(self, mask: np.ndarray) -> None:
        """Take the running requests ``mask`` marks out, the others kept in their order."""
        self.n_running = compact(mask, *self._columns)
        self._view()
        self._kv = None

    def kv_used(self) -> np.ndarray:
        """The KV-cache tokens each replica (by index) holds: its running requests' blocks. Worked out once
        between changes (routing, admission, the check for preemption and the scrape read it; the engine step hands
        over its own count, ``engine_step``'s last value, for the requests that stay), and not to be changed in
        place."""
        if self._kv is None or len(self._kv) != len(self.replicas):
            self._kv = np.bincount(self.r_rep, weights=self.model.blocks(self.r_ctx), minlength=len(self.replicas))
        return self._kv

    # -- requests ---------------------------------------------------------------------------------

    def _route(self, reqs: list[int], candidates: list[Replica]) -> list[float] | None:
        """Send requests, in order, to the replicas that take traffic (there is at least one).

        Least-waiting routing picks, for each request, the replica with the fewest waiting, then the least
        KV cache in use, then the fewest running, the first such in ``candidates``; only the waiting counts
        change while a step's arrivals are routed (admission comes after), so the keys are built once, in
        a heap.
        """
        if not reqs:
            return None
        if self.model.routing == "round-robin":
            for req in reqs:
                candidates[self.round_robin % len(candidates)].waiting.append(req)
                self.round_robin += 1
            return None
        kv: list[float] = self.kv_used().tolist()
        if self.model.routing == "prefix-aware" and self.prefix is not None:
            self._route_by_prefix(reqs, candidates, kv)
            return kv
        heap = [(len(r.waiting), kv[r.index], r.running, i) for i, r in enumerate(candidates)]
        heapq.heapify(heap)
        for req in reqs:
            waiting, held, running, i = heap[0]
            candidates[i].waiting.append(req)
            heapq.heapreplace(heap, (waiting + 1, held, running, i))
        return kv  # the KV cache in use, unchanged until admission

    def _route_by_prefix(self, reqs: list[int], candidates: list[Replica], kv: list[float]) -> None:
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
                    kv[candidates[i].index],
                    candidates[i].running,
                    i,
                ),
            )
            candidates[best].waiting.append(req)
            waiting[best] += 1

    def _admit(self, now: float, kv: list[float] | None = None) -> None:
        """Admit each replica's waiting requests in order while its batch has room and its KV cache has free
        blocks for the request's prompt (a request alone is admitted whatever its size); ``kv``, the cache in
        use if routing has just read it."""
        model = self.model
        cap, max_seqs, size = model.kv_cache_tokens, model.max_num_seqs, float(model.kv_block_tokens)
        reps: list[int] = []
        reqs: list[int] = []
        for replica in self.live:
            if not replica.waiting or replica.ready_at > now:
                continue
            if kv is None:
                kv = self.kv_used().tolist()
            while replica.waiting and replica.running < max_seqs:
                req = replica.waiting[0]
                need = math.ceil(float(self.context[req]) / size) * size
                if replica.running and kv[replica.index] + need > cap:
                    break
                replica.waiting.popleft()
                replica.running += 1
                kv[replica.index] += need
                reps.append(replica.index)
                reqs.append(req)
        if not reqs:
            return
        if self.prefix is not None:
            for rep, req in zip(reps, reqs, strict=True):
                if self.preempted[req]:
                    continue
                cached = self._reuse_prefix(self.replicas[rep], req)
                self.computed[req] = max(self.prompt[req] - cached, 1.0)
                self.to_prefill[req] = self.computed[req]
        if self.n_running + len(reqs) > len(self._columns.rep):
            self._columns = self._columns.grown(self.n_running, self.n_running + len(reqs))
        self.n_running = admit(
            np.asarray(reps, dtype=np.int64), np.asarray(reqs, dtype=np.int64), now, self.n_running, *self._columns,
            self.to_prefill, self.to_decode, self.context, self.engine_arrival, self.admitted, self.served_by,
        )  # fmt: skip
        self._view()
        self._kv = None

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
                self._advance(now, end)
            return
        candidates = [r for r in self.live if r.draining_since is None and r.ready_at <= now]
        arrived = int(np.searchsorted(self.engine_arrival, end, side="left"))
        kv = None
        if candidates:
            kv = self._route([*self.router_queue, *range(self.next_arrival, arrived)], candidates)
            self.router_queue.clear()
        else:
            self.router_queue.extend(range(self.next_arrival, arrived))
        self.next_arrival = arrived
        self._admit(now, kv)
        self.replica_seconds += self.existing * dt
        if len(self.r_req):
            self._advance(now, end)
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
        if self.next_arrival < len(self.arrival) and self.engine_arrival[self.next_arrival] < end:
            return False
        for replica in self.live:
            if replica.waiting or replica.draining_since is not None:
                return False
        return not (self.r_pre > 0).any()

    def _advance(self, now: float, end: float) -> None:
        """One step of every replica's engine (``engine.engine_step``): prompts in prefill served first come,
        first served, every other running request decoding; then first tokens, the requests done leave, and a
        replica whose cache the new tokens overflow preempts its newest (``_preempt_overflow``)."""
        model = self.model
        done, frac, generated, leaving, kv = engine_step(
            now, model.step_s, self.r_rep, self.r_pre, self.r_dec, self.r_start, self.r_ctx, self.r_chunk,
            self.step_end, len(self.replicas), *self._engine,
        )  # fmt: skip
        self.generation_tokens_total += generated
        ttft, prompts, left, left_prompts = settle(
            done, frac, leaving, now, model.step_s, end, self.r_rep, self.r_req,
            self.preempted, self.first_token, self.arrival, self.prompt, self.finished,
        )  # fmt: skip
        if len(ttft):  # counted in vLLM's TTFT histogram and token counters (cached prompt tokens included)
            self._ttfts.append(ttft)
            self.ttft_sum += float(ttft.sum())
            self.prompt_tokens_total += float(prompts.sum())
            self.generation_tokens_total += float(len(ttft))
        if len(left):  # their batch slots and KV cache are free; vLLM counts their prompts in its histogram
            self._finished_prompts.append(left_prompts)
            self.left += len(left)
            for rep in left.tolist():
                self.replicas[rep].running -= 1
            self._drop(leaving)
        self._kv = kv
        self._preempt_overflow()

    def _preempt_overflow(self) -> None:
        """Where a replica's running requests hold more KV blocks than its cache has, preempt the newest
        until they fit (vLLM V1's recompute preemption): each frees its blocks and goes back to the head of
        its replica's queue, to prefill its prompt and generated tokens again and decode the rest."""
        model = self.model
        kv = self.kv_used()
        if kv.max(initial=0.0) <= model.kv_cache_tokens + 1e-9:
            return
        over = np.flatnonzero(kv > model.kv_cache_tokens + 1e-9)
        held = model.blocks(self.r_ctx)
        drop = np.zeros(len(self.r_rep), dtype=bool)
        for rep in over.tolist():
            replica = self.replicas[rep]
            mine = np.flatnonzero(self.r_rep == rep)
            total = float(kv[rep])
            for k in mine[::-1].tolist():
                if total <= model.kv_cache_tokens + 1e-9 or replica.running <= 1:
                    break
                req = int(self.r_req[k])
                total -= float(held[k])
                drop[k] = True
                replica.running -= 1
                replica.waiting.appendleft(req)
                self.preemptions += 1
                replica.preemptions += 1
                if self.r_pre[k] <= 0:  # its first token is out: it resumes with what it has generated
                    self.preempted[req] = True
                    self.context[req] = self.to_prefill[req] = float(self.r_ctx[k])
                    self.to_decode[req] = float(self.r_dec[k])
        self._drop(drop)

    # -- what Prometheus sees ---------------------------------------------------------------------

    def _scrape(self, now: float) -> None:
        up = [r for r in self.live if r.ready_at <= now]
        kv = self.kv_used().tolist()
        waiting = tuple(float(len(r.waiting)) for r in up)
        scrape = Scrape(
            at=now,
            up=len(up),
            waiting=float(sum(waiting)),
            running=float(sum(r.running for r in up)),
            kv_max=max((kv[r.index] / self.model.kv_cache_tokens for r in up), default=math.nan),
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

    def _ttft_increase(self, now: float) -> tuple[dict[float, float], float] | None:
        """The TTFT histogram's cumulative buckets' increase over the last minute, keyed by upper bound, and the
        seconds it spans; None before two scrapes."""
        if (ends := self.window(now)) is None:
            return None
        first, last = ends
        edges = (*TTFT_BUCKETS, math.inf)
        increase = {edge: b - a for edge, a, b in zip(edges, first.ttft_buckets, last.ttft_buckets, strict=True)}
        return increase, last.at - first.at

    def ttft_quantile(self, q: float, now: float) -> float | None:
        """``histogram_quantile(q, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[1m])))``: NaN where
        no first token came in the window, as Prometheus gives."""
        if (read := self._ttft_increase(now)) is None:
            return None
        return histogram_quantile(q, read[0])

    def first_tokens_over(self, seconds: float, now: float) -> float | None:
        """The rate over the last minute of first tokens above the TTFT histogram's largest edge at or below
        ``seconds`` (``histogram.count_above``), as its default query reads it."""
        if (read := self._ttft_increase(now)) is None:
            return None
        increase, elapsed = read
        above = count_above(seconds, increase)
        return None if above is None else above / elapsed

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
