"""A fleet of simulated vLLM replicas, advanced in fixed time steps.

Each replica does continuous batching as vLLM V1's scheduler does (``replica_model`` gives the cost of an
engine step): a request reaches its replica's queue ``request_overhead_s`` after it arrives and is admitted
while the batch has room (``max_num_seqs``) and the KV cache has free blocks for its prompt; the admitted
prompts are prefilled first come, first served within each engine step's token budget, beside one token
for every decoding sequence; a sequence's cache grows a block at a time as it decodes, and when the cache
runs out the newest running request is preempted: its blocks are freed and it waits at the head of the
queue to be prefilled again, prompt and generated tokens together. The first token comes when the engine step
that completes the prefill ends. The KV-cache usage gauge shows the blocks in use.

The fleet's state lives in arrays (``engine.FleetArrays``): per request, per replica (the waiting queues among
them, as linked lists through the requests) and the running requests' columns, in their order of admission on each
replica. The seconds between the controller's ticks and Prometheus's scrapes run compiled, many a call
(``engine.run_steps``: routing, admission, the engine step, first tokens and finished requests, preemption,
draining); the fleet keeps the cluster side (replicas created, drained and removed at a tick) and the scrapes in
Python, and with prefix caching the replicas' caches, stepping a second a call. Metrics are exposed as Prometheus
would see them: gauges and counters scraped every ``scrape_interval_s`` from the replicas that are up.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.histogram import PROMPT_TOKEN_BUCKETS, TTFT_BUCKETS, count_above, histogram_quantile, lognormal_spread
from policies.metric_names import PROMPT_SPREAD_WINDOW_S
from simulations import engine
from simulations.engine import RUNNING_CAPACITY, RunningColumns
from simulations.replica_model import ReplicaModel
from simulations.traces import Trace, held_prefix

RATE_WINDOW_S = 60.0
REPLICA_CAPACITY = 16  # a fleet's per-replica arrays at first; they double as replicas are created
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


class Replica:
    """One replica of a fleet, read (and, for the cluster side, written) through the fleet's arrays."""

    def __init__(self, fleet: Fleet, index: int) -> None:
        self.fleet = fleet
        self.index = index

    def _value(self, column: str) -> float:
        return float(getattr(self.fleet.arrays, column)[self.index])

    @property
    def created_at(self) -> float:
        return self._value("created_at")

    @property
    def ready_at(self) -> float:
        return self._value("ready_at")

    @property
    def draining_since(self) -> float | None:
        since = self._value("draining_since")
        return None if math.isnan(since) else since

    @draining_since.setter
    def draining_since(self, at: float) -> None:
        self.fleet.arrays.draining_since[self.index] = at

    @property
    def removed_at(self) -> float | None:
        at = self._value("removed_at")
        return None if math.isnan(at) else at

    @property
    def running(self) -> int:
        return int(self.fleet.arrays.running[self.index])

    @property
    def preemptions(self) -> int:
        """``vllm:num_preemptions_total``"""
        return int(self.fleet.arrays.preemptions[self.index])

    @property
    def waiting(self) -> tuple[int, ...]:
        """The requests in this replica's queue, from its head."""
        s = self.fleet.arrays
        queue, request = [], int(s.head[self.index])
        for _ in range(int(s.queued[self.index])):
            queue.append(request)
            request = int(s.link[request])
        return tuple(queue)

    @property
    def blocks(self) -> OrderedDict[int, None]:
        """Prefix caching: the keys of the prompt blocks this replica holds, least recently used first."""
        return self.fleet.blocks[self.index]

    def ready(self, now: float) -> bool:
        return self.removed_at is None and self.ready_at <= now

    @property
    def in_flight(self) -> int:
        return self.running + int(self.fleet.arrays.queued[self.index])


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


class _Count:
    """One of the fleet's counts (``engine.FleetArrays.ints``), read as an attribute."""

    def __init__(self, which: int, doc: str) -> None:
        self.which, self.__doc__ = which, doc

    def __get__(self, fleet: Fleet, owner: type | None = None) -> int:
        return int(fleet.arrays.ints[self.which])


class _Total:
    """One of the fleet's running totals (``engine.FleetArrays.sums``), read as an attribute."""

    def __init__(self, which: int, doc: str) -> None:
        self.which, self.__doc__ = which, doc

    def __get__(self, fleet: Fleet, owner: type | None = None) -> float:
        return float(fleet.arrays.sums[self.which])


class Fleet:
    def __init__(self, model: ReplicaModel, trace: Trace, initial_replicas: int) -> None:
        self.model = model
        self.trace = trace
        n = trace.requests
        self.prefix = trace.prefix if model.prefix_caching else None
        self.cache_blocks = int(model.kv_cache_tokens // self.prefix.block_tokens) if self.prefix else 0
        # Prefix caching: each replica's prompt blocks, by key, least recently used first.
        self.blocks: list[OrderedDict[int, None]] = []
        params = np.zeros(engine.PARAMS)
        params[[engine.DT, engine.CAP, engine.MAX_SEQS, engine.BLOCK]] = (
            model.step_s, model.kv_cache_tokens, model.max_num_seqs, model.kv_block_tokens,
        )  # fmt: skip
        params[[engine.WEIGHT_READ, engine.KV_READ, engine.FLOPS, engine.BUDGET]] = (
            model.weight_read_s, model.kv_read_s_per_token, model.prefill_tokens_per_s, model.max_num_batched_tokens,
        )  # fmt: skip
        params[[engine.DRAIN_TIMEOUT, engine.SCRAPE_INTERVAL]] = model.drain_timeout_s, model.scrape_interval_s
        params[engine.ROUND_ROBIN_ROUTING] = model.routing == "round-robin"
        prompt = trace.prompt_tokens.astype(np.float64)
        sums = np.zeros(5)
        sums[engine.LAST_SCRAPE] = -math.inf
        self.arrays = engine.FleetArrays(
            arrival=trace.arrival_s,
            # The engine sees a request ``request_overhead_s`` after it arrives (HTTP, tokenisation, scheduling).
            engine_arrival=trace.arrival_s + model.request_overhead_s,
            prompt=prompt,
            # The prompt tokens each request prefills: all of them, less a prefix its replica holds (set on
            # admission). What the SLO judges a request's own prefill by.
            computed=prompt.copy(),
            # What a request holds in the KV cache once prefilled, and the tokens it prefills and decodes when
            # admitted: its prompt, prefilled in full and decoded to the end, until it is preempted; then its
            # prompt and the tokens generated so far, all prefilled again, and what is left to decode.
            context=prompt.copy(),
            to_prefill=prompt.copy(),
            to_decode=trace.output_tokens.astype(np.float64) - 1.0,
            preempted=np.zeros(n, dtype=bool),
            first_token=np.full(n, np.nan),
            admitted=np.full(n, np.nan),
            finished=np.full(n, np.nan),
            dropped=np.zeros(n, dtype=bool),
            served_by=np.full(n, -1, dtype=np.int64),  # the replica (index) that admitted each request
            link=np.full(n, engine.NONE, dtype=np.int64),
            **_replica_columns(REPLICA_CAPACITY),
            columns=RunningColumns.empty(RUNNING_CAPACITY),
            ints=np.zeros(7, dtype=np.int64),
            sums=sums,
            # ``vllm:time_to_first_token_seconds`` and ``vllm:request_prompt_tokens`` (counted as each request
            # finishes, as vLLM counts it): by bucket, not cumulative
            ttft_counts=np.zeros(len(TTFT_BUCKETS) + 1),
            prompt_counts=np.zeros(len(PROMPT_TOKEN_BUCKETS) + 1),
            ttft_edges=np.asarray(TTFT_BUCKETS, dtype=np.float64),
            prompt_edges=np.asarray(PROMPT_TOKEN_BUCKETS, dtype=np.float64),
            params=params,
        )
        self.output = trace.output_tokens.astype(np.float64)
        self.prompt_scrapes: deque[tuple[float, np.ndarray]] = deque()  # the last hour's prompt-length histograms
        self.scrapes: deque[Scrape] = deque()
        self._window: tuple[float, Scrape | None, tuple[Scrape, Scrape] | None] = (math.nan, None, None)
        for _ in range(initial_replicas):
            self._create(0.0, 0.0)

    def __getattr__(self, name: str) -> np.ndarray:
        """The per-request arrays (``arrival``, ``first_token`` and the others of ``engine.FleetArrays``)."""
        if name in engine.PER_REQUEST:
            return getattr(self.__dict__["arrays"], name)  # type: ignore[no-any-return]
        raise AttributeError(name)

    n_replicas = _Count(engine.N_REPLICAS, "replicas ever created")
    routed = _Count(engine.ROUTED, "requests routed: those after them, up to ``next_arrival``, wait at the router")
    n_running = _Count(engine.N_RUNNING, "running requests")
    next_arrival = _Count(engine.NEXT_ARRIVAL, "requests that have reached the engine")
    left = _Count(engine.LEFT, "requests finished or dropped: the gateway holds ``next_arrival - left`` open")
    preemptions = _Count(engine.PREEMPTIONS, "requests preempted, on every replica")
    replica_seconds = _Total(engine.REPLICA_SECONDS, "the seconds replicas have existed, added up")
    prompt_tokens_total = _Total(engine.PROMPT_TOKENS, "``vllm:prompt_tokens_total``, every replica")
    generation_tokens_total = _Total(engine.GENERATION_TOKENS, "``vllm:generation_tokens_total``, every replica")
    ttft_sum = _Total(engine.TTFT_SUM, "the TTFT histogram's ``_sum``: every time to first token so far")
    last_scrape_at = _Total(engine.LAST_SCRAPE, "when Prometheus last scraped the fleet")

    def _running(self, column: str) -> np.ndarray:
        return getattr(self.arrays.columns, column)[: self.n_running]  # type: ignore[no-any-return]

    # the running requests' entries of the columns (views, valid until the fleet next steps)
    r_rep = property(lambda self: self._running("rep"))
    r_req = property(lambda self: self._running("req"))
    r_pre = property(lambda self: self._running("pre"))
    r_dec = property(lambda self: self._running("dec"))
    r_ctx = property(lambda self: self._running("ctx"))

    @property
    def step_end(self) -> np.ndarray:
        """When each replica's engine step under way ends (by index)."""
        return self.arrays.step_end[: self.n_replicas]

    def cached(self, req: int, computed: float) -> None:
        """Request ``req`` will find its prompt in its replica's prefix cache but for its last ``computed`` tokens,
        which it prefills (``vllm bench serve``'s test request leaves the run's first prompt there)."""
        self.computed[req] = self.to_prefill[req] = computed

    @property
    def ttft_counts(self) -> np.ndarray:
        """First tokens so far by ``TTFT_BUCKETS`` bucket (then ``+Inf``), not cumulative."""
        return self.arrays.ttft_counts

    @property
    def prompt_counts(self) -> np.ndarray:
        """Finished requests so far by ``PROMPT_TOKEN_BUCKETS`` bucket of their prompt (then ``+Inf``)."""
        return self.arrays.prompt_counts

    # -- the cluster side -------------------------------------------------------------------------

    @property
    def replicas(self) -> list[Replica]:
        """Every replica ever created; index = position."""
        return [Replica(self, i) for i in range(self.n_replicas)]

    @property
    def live(self) -> list[Replica]:
        """The replicas not removed yet."""
        return [Replica(self, int(i)) for i in np.flatnonzero(self._live())]

    def _live(self) -> np.ndarray:
        return np.isnan(self.arrays.removed_at[: self.n_replicas])  # type: ignore[no-any-return]

    def _active(self) -> np.ndarray:
        n = self.n_replicas
        return self._live() & np.isnan(self.arrays.draining_since[:n])  # type: ignore[no-any-return]

    def _create(self, now: float, ready_at: float) -> None:
        index = self.n_replicas
        if index == len(self.arrays.ready_at):
            self._grow(replicas=2 * index)
        live = self.existing + 1
        if live * self.model.max_num_seqs > len(self.arrays.columns.rep):  # what may run at once
            self._grow(running=live * self.model.max_num_seqs)
        s = self.arrays
        s.created_at[index], s.ready_at[index], s.step_end[index] = now, ready_at, -math.inf
        s.ints[engine.N_REPLICAS] += 1
        self.blocks.append(OrderedDict())

    def _grow(self, replicas: int | None = None, running: int | None = None) -> None:
        """The fleet's arrays with room for ``replicas`` replicas or ``running`` running requests (twice what they
        had, or more), what they held copied over."""
        s, changes = self.arrays, dict[str, Any]()
        if replicas is not None:
            n = self.n_replicas
            for name, column in _replica_columns(replicas).items():
                column[:n] = getattr(s, name)[:n]
                changes[name] = column
        if running is not None:
            changes["columns"] = s.columns.grown(self.n_running, running)
        self.arrays = s._replace(**changes)

    def active(self) -> list[Replica]:
        """Replicas that count toward ``spec.replicas``: ready or starting, not draining."""
        return [Replica(self, int(i)) for i in np.flatnonzero(self._active())]

    def _counts(self, now: float = math.nan) -> tuple[int, int, int]:
        """``engine.replica_counts``: existing, active, and active and ready at ``now``."""
        s = self.arrays
        return engine.replica_counts(s.removed_at, s.draining_since, s.ready_at, self.n_replicas, now)

    @property
    def spec_replicas(self) -> int:
        return self._counts()[1]

    def ready_replicas(self, now: float) -> int:
        return self._counts(now)[2]

    @property
    def existing(self) -> int:
        return self._counts()[0]

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
                engine.abort(self.arrays, replica.index, now)
            else:
                replica.draining_since = now

    def kv_used(self) -> np.ndarray:
        """The KV-cache tokens each replica (by index) holds: its running requests' blocks."""
        return engine.kv_used(self.arrays)

    # -- requests ---------------------------------------------------------------------------------

    def advance(self, now: float, tick_at: float, end: float, tail_end: float, check_every: int) -> float:
        """Step from ``now`` until the run has something to do (``engine.run_steps``): the next tick at
        ``tick_at``, a whole ``check_every`` seconds, ``end`` passed, or the run over (``tail_end``). With prefix
        caching a step that routes or admits is one call (``step``), the others many. Returns where it stopped."""
        prefix = self.prefix is not None
        if prefix and engine.needs_python(self.arrays, now):
            self.step(now)
            return now + self.model.step_s
        now, scrape = engine.run_steps(self.arrays, now, tick_at, end, tail_end, check_every, prefix)
        if scrape:
            self._scrape(now)
        return float(now)

    def step(self, now: float) -> None:
        """Advance from ``now`` to ``now + step_s``."""
        if self.prefix is None:
            scrape = engine.fleet_step(self.arrays, now)
        else:
            engine.arrive(self.arrays, now)
            if self.model.routing == "prefix-aware":
                self._route_by_prefix(now)
            else:
                engine.route(self.arrays, now)
            reps, reqs = engine.take_admissions(self.arrays, now)
            self._reuse_prefixes(reps, reqs)
            scrape = engine.after_admission(self.arrays, reps, reqs, now)
        if scrape:
            self._scrape(now + self.model.step_s)

    def _route_by_prefix(self, now: float) -> None:
        """Prefix-aware routing: each request goes to the replica that holds the longest prefix of its
        prompt, among those with at most ``PREFIX_ROUTING_SLACK`` more waiting than the least (so that a
        popular prefix cannot pile its requests onto one replica); ties go as in least-waiting routing."""
        assert self.prefix is not None
        s = self.arrays
        n = self.n_replicas
        candidates = np.flatnonzero(self._active() & (s.ready_at[:n] <= now)).tolist()
        first, last = self.routed, self.next_arrival
        if not candidates or first == last:
            return
        kv = self.kv_used().tolist()
        running = s.running[:n].tolist()
        waiting = s.queued[:n].tolist()
        chosen = []
        for req in range(first, last):
            keys = self.prefix.keys(req)
            within = min(waiting[r] for r in candidates) + PREFIX_ROUTING_SLACK
            best = min(
                (r for r in candidates if waiting[r] <= within),
                key=lambda r: (-held_prefix(self.blocks[r], keys), waiting[r], kv[r], running[r], r),
            )
            chosen.append(best)
            waiting[best] += 1
        engine.enqueue_all(s, np.asarray(chosen, dtype=np.int64), np.arange(first, last, dtype=np.int64))

    def _reuse_prefixes(self, reps: np.ndarray, reqs: np.ndarray) -> None:
        """The prompt tokens each admitted request prefills: those after the prefix its replica holds (a preempted
        one prefills what it had, again)."""
        assert self.prefix is not None
        for rep, req in zip(reps.tolist(), reqs.tolist(), strict=True):
            if self.preempted[req]:
                continue
            cached = self._reuse_prefix(rep, req)
            self.computed[req] = max(self.prompt[req] - cached, 1.0)
            self.to_prefill[req] = self.computed[req]

    def _reuse_prefix(self, replica: int, req: int) -> float:
        """The prompt tokens of ``req`` that ``replica`` holds from earlier prompts (the longest prefix of
        its blocks in the cache); all its blocks are then held, the first the most recently used, so that
        the cache gives up a prompt's tail before its head, as vLLM's does."""
        assert self.prefix is not None
        keys = self.prefix.keys(req)
        cache = self.blocks[replica]
        hit = held_prefix(cache, keys)
        for key in reversed(keys):
            cache[key] = None
            cache.move_to_end(key)
        while len(cache) > self.cache_blocks:
            cache.popitem(last=False)
        return float(hit * self.prefix.block_tokens)

    # -- what Prometheus sees ---------------------------------------------------------------------

    def _scrape(self, now: float) -> None:
        s = self.arrays
        queued, running, kv_max, ttft_buckets = engine.scrape_figures(s, now)
        waiting = tuple(queued.tolist())
        scrape = Scrape(
            at=now,
            up=len(waiting),
            waiting=float(sum(waiting)),
            running=running,
            kv_max=kv_max,
            prompt_tokens_total=self.prompt_tokens_total,
            generation_tokens_total=self.generation_tokens_total,
            per_pod_waiting=waiting,
            ttft_buckets=tuple(ttft_buckets.tolist()),
            ttft_sum=self.ttft_sum,
        )
        self.scrapes.append(scrape)
        s.sums[engine.LAST_SCRAPE] = now
        while self.scrapes and self.scrapes[0].at < now - max(RATE_WINDOW_S, self.model.staleness_s) - 1:
            self.scrapes.popleft()
        if waiting:
            self.prompt_scrapes.append((now, np.cumsum(self.prompt_counts)))
        while self.prompt_scrapes and self.prompt_scrapes[0][0] < now - PROMPT_SPREAD_WINDOW_S:
            self.prompt_scrapes.popleft()

    def latest_scrape(self, now: float) -> Scrape | None:
        if not self.scrapes or self.scrapes[-1].at < now - self.model.staleness_s:
            return None
        return self.scrapes[-1]

    def window(self, now: float) -> tuple[Scrape, Scrape] | None:
        """The first and the last scrape of the last ``RATE_WINDOW_S``, what ``rate(...[1m])`` reads; kept until the
        next scrape, since a tick reads it once a signal."""
        last = self.scrapes[-1] if self.scrapes else None
        if self._window[0] != now or self._window[1] is not last:
            window = [s for s in self.scrapes if now - RATE_WINDOW_S <= s.at <= now]
            self._window = (now, last, (window[0], window[-1]) if len(window) >= 2 else None)
        return self._window[2]

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
        """Every request has arrived and none is waiting or running."""
        return bool(engine.done(self.arrays))


def _replica_columns(capacity: int) -> dict[str, np.ndarray]:
    """``engine.FleetArrays``' per-replica arrays for ``capacity`` replicas: none yet draining or removed, every
    queue empty."""
    columns = {name: np.full(capacity, np.nan) for name in ("created_at", "ready_at", "draining_since", "removed_at")}
    columns["step_end"] = np.full(capacity, -math.inf)
    for name in ("running", "preemptions", "queued"):
        columns[name] = np.zeros(capacity, dtype=np.int64)
    for name in ("head", "tail"):
        columns[name] = np.full(capacity, engine.NONE, dtype=np.int64)
    return columns


def warm() -> None:
    """Compile the fleet's steps now (or load them from numba's cache), on a fleet of two requests, the passes the
    steps with prefix caching call one by one, and a benchmark's replay: what ``simulate`` does before anything
    else, so that it can say when it compiled (some 20 s, the first run after an install), and before it forks
    workers, so that they inherit the machine code rather than each compile it."""
    if not engine.COMPILED:
        return
    model = ReplicaModel(kv_cache_tokens=4096, drain_timeout_s=1.0)
    trace = Trace("warm", np.array([0.0, 0.5]), np.array([3000, 3000]), np.array([400, 400]))
    fleet = Fleet(model, trace, 2)
    now = fleet.advance(0.0, 30.0, 0.5, 60.0, 60)
    fleet.step(now)
    s = fleet.arrays
    engine.needs_python(s, now)
    engine.arrive(s, now)
    engine.route(s, now)
    engine.enqueue_all(s, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    reps, reqs = engine.take_admissions(s, now)
    engine.after_admission(s, reps, reqs, now)
    fleet.kv_used()
    fleet._counts(now)
    engine.scrape_figures(s, now)
    engine.nearest_rank_by_group(np.zeros(2), np.zeros(2, dtype=np.int64), 1, 0.9)
    fleet.scale_to(0, now)
    bench = Fleet(model, Trace("warm", np.full(2, math.inf), np.array([3000, 3000]), np.array([400, 400])), 1)
    engine.replay_bench(bench.arrays, np.zeros(2), 1, 0.001, model.request_overhead_s, 1e6)
