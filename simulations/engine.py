"""The simulator's compiled part, by numba where it is installed (the ``[sim]`` extra): one step of every
replica's engine over a fleet's running requests (``engine_step``), the passes that keep the running requests'
columns (``admit``, ``settle``, ``compact``), and the fleet's seconds around them over its state in arrays
(``FleetArrays``; ``run_steps``: routing, admission, preemption, draining, many steps a call). A simulated second
costs a few microseconds of compiled code where the same work in Python around compiled passes cost some 60
(docs/decisions/simulator-speed.md). Without numba the interpreter runs the same code, many times slower.
"""

from __future__ import annotations

import functools
import importlib.util
import types
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T", float, np.ndarray)
SIM_EXTRA = "pip install 'vllm-autoscaler[sim]'"  # what installs numba, and matplotlib for the plots
COMPILED = importlib.util.find_spec("numba") is not None


def _compiled(function: F, inline: bool = False) -> F:
    """``function`` compiled by numba at its first call and cached on disk beside this file (or in the user's cache
    where that is read-only; compiled anew each process where neither is writable), or as written without numba.
    Compiled when first called, not when imported: numba and LLVM (some 60 MiB) are loaded only by a process that
    steps a fleet, not by one that only reads the simulator's modules (the bench's daemon beside it). The compiled
    function calls the others of this module compiled (numba cannot call the Python wrapper around them); they all
    live in this one file because numba's cache knows a function's own file only, and would keep a caller's machine
    code after a callee in another file had changed. With ``inline``, numba writes the function into each compiled
    caller (``_inlined``): a small one called per request or per replica and step, where a call's cost showed."""
    if not COMPILED:
        return function
    dispatcher: Any = None

    def jitted() -> Any:
        nonlocal dispatcher
        if dispatcher is None:
            import numba

            scope = dict(function.__globals__)
            copy = types.FunctionType(function.__code__, scope, function.__name__, None, function.__closure__)
            copy.__qualname__, copy.__doc__ = function.__qualname__, function.__doc__
            options: dict[str, Any] = {"nogil": True, "inline": "always" if inline else "never"}
            try:
                dispatcher = numba.njit(cache=True, **options)(copy)
            except RuntimeError:  # numba found no writable place for its cache: a second of compiling, every run
                dispatcher = numba.njit(**options)(copy)
            for name, value in function.__globals__.items():
                if name == function.__name__:
                    scope[name] = dispatcher  # a function that calls itself
                elif callable(jit := getattr(value, "jitted", None)):
                    scope[name] = jit()
        return dispatcher

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        if dispatcher is None:
            jitted()
        return dispatcher(*args)

    call.jitted = jitted  # type: ignore[attr-defined]
    return cast(F, call)


def _inlined(function: F) -> F:
    """``_compiled``, written into each compiled caller."""
    return _compiled(function, inline=True)


@_compiled
def engine_step(
    now: float,
    dt: float,
    rep: np.ndarray,
    pre: np.ndarray,
    dec: np.ndarray,
    start: np.ndarray,
    ctx: np.ndarray,
    chunk: np.ndarray,
    step_end: np.ndarray,
    replicas: int,
    weight_read_s: float,
    kv_read_s_per_token: float,
    flops: float,
    budget: float,
    block: float,
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """Advance every replica's engine from ``now`` by ``dt``: the running requests, one entry each in their
    order of admission on their replica (``rep``), each with its prompt tokens left to prefill (``pre``),
    tokens left to decode (``dec``), the moment it was admitted (``start``), its tokens in the KV cache
    (``ctx``) and its prompt tokens in the engine step under way (``chunk``); ``step_end``, when each
    replica's step under way ends (none after it has passed). All but ``rep`` and ``start`` are updated in
    place, and a step may end in a later call.

    While a replica has prompts to prefill, its engine runs whole steps as vLLM V1's scheduler makes them:
    a step takes one token of every decoding sequence and, first come, first served, chunks of the prompts
    admitted before it starts, within its ``budget`` of tokens; it costs a weight read, the decoding
    sequences' KV-cache read (``kv_read_s_per_token``) and its tokens' compute (``flops`` a second). Its
    tokens come out at its end: a prompt whose last chunk it holds has its first token then, together with
    the others it completes, and a prompt that arrives meanwhile waits for the next step. With no prompt to
    prefill the decoding sequences run steps of the same cost, one token each (a fraction of a step where
    the call ends inside one). Example: at 2,400 tokens a second and a budget of 65,536, four prompts of
    16,384 tokens sent together all get their first token after 27.3 s, not after 6.8, 13.7, 20.5 and 27.3 s
    (``tests/test_engine.py``).

    Returns the positions of the prompts whose prefill completed, the fraction of the call at which each
    did, the tokens generated, which requests have no token left to generate, and the KV-cache tokens each
    replica holds for the others, in whole ``block``s (what ``Fleet.kv_used`` works out once they have left).
    """
    n = len(rep)
    end = now + dt
    # Each replica's requests in order of admission: a counting sort of the positions by replica.
    count = np.zeros(replicas + 1, dtype=np.int64)
    for k in range(n):
        count[rep[k] + 1] += 1
    for r in range(replicas):
        count[r + 1] += count[r]
    mine = np.empty(n, dtype=np.int64)
    fill = count[:-1].copy()
    for k in range(n):
        mine[fill[rep[k]]] = k
        fill[rep[k]] += 1
    out = np.zeros(n, dtype=np.bool_)
    for k in range(n):
        out[k] = pre[k] <= 0.0 and dec[k] <= 1e-9
    done = np.empty(n, dtype=np.int64)
    frac = np.empty(n)
    completed = 0
    generated = 0.0
    for r in range(replicas):
        first, last = count[r], count[r + 1]
        t = now
        while t < end:
            ending = step_end[r] > t  # a step under way: its tokens come out when it ends
            if ending and step_end[r] > end:
                break
            if ending:
                steps, until = 1.0, step_end[r]
            else:
                batch = 0.0
                context = 0.0
                for j in range(first, last):
                    k = mine[j]
                    if pre[k] <= 0.0 and not out[k]:
                        batch += 1.0
                        context += ctx[k]
                cost = weight_read_s + kv_read_s_per_token * context + batch / flops
                room = budget - batch
                prompts = 0.0
                arrives = end
                for j in range(first, last):
                    k = mine[j]
                    if pre[k] <= 0.0:
                        continue
                    if start[k] > t:
                        arrives = min(arrives, start[k])
                    elif room > 0.0:
                        chunk[k] = min(pre[k], room)
                        room -= chunk[k]
                        prompts += chunk[k]
                if prompts > 0.0:
                    step_end[r] = t + cost + prompts / flops
                    continue
                # Decoding alone until the next prompt is admitted or the call ends.
                steps, until = (arrives - t) / cost, arrives
            for j in range(first, last):  # the decoding sequences: a token a step
                k = mine[j]
                if pre[k] <= 0.0 and not out[k]:
                    token = min(steps, dec[k])
                    dec[k] -= token
                    ctx[k] += token
                    generated += token
                    out[k] = dec[k] <= 1e-9
            t = until
            if not ending:
                continue
            for j in range(first, last):  # the step's chunks: the prompts it completes have their first token
                k = mine[j]
                if chunk[k] > 0.0:
                    pre[k] = max(pre[k] - chunk[k], 0.0)
                    chunk[k] = 0.0
                    if pre[k] <= 1e-9:
                        pre[k] = 0.0
                        out[k] = dec[k] <= 1e-9
                        done[completed] = k
                        frac[completed] = (t - now) / dt
                        completed += 1
    kv = np.zeros(replicas)
    for k in range(n):
        if not out[k]:
            kv[rep[k]] += held(ctx[k], block)
    return done[:completed], frac[:completed], generated, out, kv


@_inlined
def held(tokens: T, block: float) -> T:
    """The KV-cache tokens that ``tokens`` (a value, or each of an array) occupy: whole blocks of ``block``."""
    return np.ceil(tokens / block) * block  # type: ignore[no-any-return]


RUNNING_CAPACITY = 256  # a fleet's running requests' columns at first; they double when admission outgrows them


class RunningColumns(NamedTuple):
    """A fleet's running requests, one entry each in their order of admission on each replica, the first so many
    (``Fleet.n_running``) of each column: the replica, the request, its prompt tokens left to prefill, its tokens
    left to decode, when it was admitted, its tokens in the KV cache and its prompt tokens in the engine step under
    way (``engine_step``'s arrays). Preallocated: admission writes into them and a request that leaves is compacted
    away, where arrays made anew at each step cost most of a step (docs/decisions/simulator-speed.md)."""

    rep: np.ndarray
    req: np.ndarray
    pre: np.ndarray
    dec: np.ndarray
    start: np.ndarray
    ctx: np.ndarray
    chunk: np.ndarray

    @classmethod
    def empty(cls, capacity: int) -> RunningColumns:
        ints = [np.zeros(capacity, dtype=np.int64) for _ in range(2)]
        return cls(*ints, *(np.zeros(capacity) for _ in range(5)))

    def grown(self, used: int, needed: int) -> RunningColumns:
        """Columns of at least ``needed`` entries (twice as many as now, or more), the first ``used`` copied over."""
        capacity = max(needed, 2 * len(self.rep))
        grown = RunningColumns.empty(capacity)
        for old, new in zip(self, grown, strict=True):
            new[:used] = old[:used]
        return grown


@_compiled
def admit(
    reps: np.ndarray,
    reqs: np.ndarray,
    now: float,
    n: int,
    columns: RunningColumns,
    to_prefill: np.ndarray,
    to_decode: np.ndarray,
    context: np.ndarray,
    engine_arrival: np.ndarray,
    admitted: np.ndarray,
    served_by: np.ndarray,
) -> int:
    """Add requests ``reqs``, admitted on replicas ``reps`` at ``now``, after the ``n`` running (the columns hold
    them): each with what it has to prefill and to decode and its context, admitted when it reaches its replica if
    that is inside the step, not at the step's start (its first admission is recorded, a preempted one's kept), and
    served by its replica. Returns the running requests' count."""
    for j in range(len(reqs)):
        r = reqs[j]
        k = n + j
        at = max(engine_arrival[r], now)
        if np.isnan(admitted[r]):
            admitted[r] = at
        served_by[r] = reps[j]
        c = columns
        c.rep[k], c.req[k], c.pre[k], c.dec[k] = reps[j], r, to_prefill[r], to_decode[r]
        c.start[k], c.ctx[k], c.chunk[k] = at, context[r], 0.0
    return n + len(reqs)


@_compiled
def compact(drop: np.ndarray, columns: RunningColumns) -> int:
    """Take the running requests ``drop`` marks (one entry each of the first ``len(drop)``) out of the columns, the
    others kept in order at their start. Returns how many are kept."""
    c, w = columns, 0
    for k in range(len(drop)):
        if drop[k]:
            continue
        if w != k:
            c.rep[w], c.req[w], c.pre[w], c.dec[w] = c.rep[k], c.req[k], c.pre[k], c.dec[k]
            c.start[w], c.ctx[w], c.chunk[w] = c.start[k], c.ctx[k], c.chunk[k]
        w += 1
    return w


@_compiled
def settle(
    done: np.ndarray,
    frac: np.ndarray,
    leaving: np.ndarray,
    now: float,
    dt: float,
    end: float,
    rep: np.ndarray,
    req: np.ndarray,
    preempted: np.ndarray,
    first_token: np.ndarray,
    arrival: np.ndarray,
    prompt: np.ndarray,
    finished: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """After ``engine_step`` from ``now`` by ``dt``, over the running requests (``rep``, ``req``): those at ``done``
    have their first token at ``frac`` of the step (unless preempted after it and prefilled again), those
    ``leaving`` finish at ``end``. Returns the new first tokens' times to first token and their prompts' lengths
    (what vLLM's TTFT histogram and prompt-token counter count then), and the replicas and the prompts' lengths of
    the requests that finished (what frees their batch slots, and vLLM's prompt-length histogram counts)."""
    ttft = np.empty(len(done))
    prompts = np.empty(len(done))
    fresh = 0
    for j in range(len(done)):
        r = req[done[j]]
        if preempted[r]:
            continue
        at = now + frac[j] * dt
        first_token[r] = at
        ttft[fresh] = at - arrival[r]
        prompts[fresh] = prompt[r]
        fresh += 1
    left = np.empty(len(leaving), dtype=np.int64)
    left_prompts = np.empty(len(leaving))
    gone = 0
    for k in range(len(leaving)):
        if leaving[k]:
            finished[req[k]] = end
            left[gone] = rep[k]
            left_prompts[gone] = prompt[req[k]]
            gone += 1
    return ttft[:fresh], prompts[:fresh], left[:gone], left_prompts[:gone]


# -- the fleet's seconds ---------------------------------------------------------------------------------
# Each replica's waiting queue is a linked list through the requests (``link``: the next request in the same queue),
# which takes a request at either end in constant time; the router's queue is the arrivals not yet routed,
# ``[routed, next_arrival)``. With prefix caching the fleet routes (``enqueue_all``) and sets the prompt tokens each
# admission prefills between ``take_admissions`` and ``after_admission``, which ``fleet_step`` calls back to back.

# ``FleetArrays.ints``: the fleet's counts
N_REPLICAS, N_RUNNING, NEXT_ARRIVAL, ROUTED, LEFT, ROUND_ROBIN, PREEMPTIONS = range(7)
# ``FleetArrays.sums``: its running totals (``LAST_SCRAPE``: when it was last scraped)
REPLICA_SECONDS, PROMPT_TOKENS, GENERATION_TOKENS, TTFT_SUM, LAST_SCRAPE = range(5)
# ``FleetArrays.params``: the replica model as the steps read it
DT, CAP, MAX_SEQS, BLOCK, WEIGHT_READ, KV_READ, FLOPS, BUDGET = range(8)
DRAIN_TIMEOUT, SCRAPE_INTERVAL, ROUND_ROBIN_ROUTING = range(8, 11)
PARAMS = 11
NONE = -1  # no request: the end of a queue


class FleetArrays(NamedTuple):
    """A fleet's state as the compiled steps read and change it: per request (by index in the trace), per replica
    (by index, the first ``ints[N_REPLICAS]`` of arrays that grow by doubling), the running requests' columns
    (``engine.RunningColumns``, the first ``ints[N_RUNNING]`` entries), counts, totals and histograms."""

    arrival: np.ndarray
    engine_arrival: np.ndarray
    prompt: np.ndarray
    computed: np.ndarray
    context: np.ndarray
    to_prefill: np.ndarray
    to_decode: np.ndarray
    preempted: np.ndarray
    first_token: np.ndarray
    admitted: np.ndarray
    finished: np.ndarray
    dropped: np.ndarray
    served_by: np.ndarray
    link: np.ndarray
    created_at: np.ndarray
    ready_at: np.ndarray
    draining_since: np.ndarray  # NaN: not draining
    removed_at: np.ndarray  # NaN: not removed
    step_end: np.ndarray
    running: np.ndarray
    preemptions: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    queued: np.ndarray
    columns: RunningColumns
    ints: np.ndarray
    sums: np.ndarray
    ttft_counts: np.ndarray
    prompt_counts: np.ndarray
    ttft_edges: np.ndarray
    prompt_edges: np.ndarray
    params: np.ndarray


PER_REQUEST = FleetArrays._fields[: FleetArrays._fields.index("created_at")]  # one entry a request of the trace


@_compiled
def _block_sum(values: np.ndarray, first: int, n: int) -> float:
    """numpy's sum of at most 128 values: in order below eight, else in eight interleaved partial sums."""
    if n < 8:
        total = 0.0
        for i in range(n):
            total += values[first + i]
        return total
    r = values[first : first + 8].copy()
    whole = n - n % 8
    for i in range(8, whole, 8):
        for j in range(8):
            r[j] += values[first + i + j]
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for i in range(whole, n):
        total += values[first + i]
    return float(total)


@_compiled
def pairwise_sum(values: np.ndarray) -> float:
    """The sum of ``values`` exactly as numpy's ``sum`` makes it (blocks of at most 128 values, halved at a
    multiple of eight, added in pairs), so that the compiled steps' totals equal to the bit those the Python steps
    made with ``ndarray.sum``. Its halving is walked with a stack: numba's cache cannot hold a recursive function."""
    if len(values) <= 128:
        return _block_sum(values, 0, len(values))
    firsts = np.empty(64, dtype=np.int64)
    sizes = np.empty(64, dtype=np.int64)
    stages = np.zeros(64, dtype=np.int64)
    sums = np.empty(64)
    firsts[0], sizes[0], top, summed = 0, len(values), 1, 0
    while top:
        first, n, stage = firsts[top - 1], sizes[top - 1], stages[top - 1]
        if n <= 128:
            sums[summed] = _block_sum(values, first, n)
            summed += 1
            top -= 1
            continue
        half = n // 2
        half -= half % 8
        if stage < 2:  # its first half, then its second, each summed on the stack above it
            stages[top - 1] += 1
            firsts[top], sizes[top], stages[top] = first + stage * half, half if stage == 0 else n - half, 0
            top += 1
        else:
            summed -= 1
            sums[summed - 1] += sums[summed]
            top -= 1
    return float(sums[0])


@_inlined
def enqueue(s: FleetArrays, replica: int, request: int) -> None:
    """``request`` joins the end of ``replica``'s waiting queue."""
    s.link[request] = NONE
    if s.queued[replica] == 0:
        s.head[replica] = request
    else:
        s.link[s.tail[replica]] = request
    s.tail[replica] = request
    s.queued[replica] += 1


@_inlined
def requeue(s: FleetArrays, replica: int, request: int) -> None:
    """``request`` goes back to the head of ``replica``'s waiting queue (preempted)."""
    s.link[request] = s.head[replica] if s.queued[replica] else NONE
    if s.queued[replica] == 0:
        s.tail[replica] = request
    s.head[replica] = request
    s.queued[replica] += 1


@_compiled
def enqueue_all(s: FleetArrays, replicas: np.ndarray, requests: np.ndarray) -> None:
    """Each of ``requests`` joins the end of the queue of its replica in ``replicas``, in order; all arrivals up to
    ``ints[NEXT_ARRIVAL]`` are then routed."""
    for j in range(len(requests)):
        enqueue(s, replicas[j], requests[j])
    s.ints[ROUTED] = s.ints[NEXT_ARRIVAL]


@_compiled
def kv_used(s: FleetArrays) -> np.ndarray:
    """The KV-cache tokens each replica holds: its running requests' contexts in whole blocks, added up in their
    order."""
    n, c = s.ints[N_RUNNING], s.columns
    return np.bincount(c.rep[:n], weights=held(c.ctx[:n], s.params[BLOCK]), minlength=s.ints[N_REPLICAS])


@_compiled
def replica_counts(
    removed_at: np.ndarray, draining_since: np.ndarray, ready_at: np.ndarray, n: int, now: float
) -> tuple[int, int, int]:
    """Of the first ``n`` replicas (``FleetArrays``' columns): those that exist (not removed), those of them that
    count toward ``spec.replicas`` (not draining), and those of them ready at ``now``. Given the three columns, not
    the fleet, since a tick reads them several times and a call that unboxes every array costs several times more."""
    live = active = ready = 0
    for r in range(n):
        if np.isnan(removed_at[r]):
            live += 1
            if np.isnan(draining_since[r]):
                active += 1
                ready += ready_at[r] <= now
    return live, active, ready


@_compiled
def scrape_figures(s: FleetArrays, now: float) -> tuple[np.ndarray, float, float, np.ndarray]:
    """What one scrape at ``now`` reads off the replicas that are up (not removed, ready): each one's waiting
    requests, their running requests added up, the largest share of a KV cache in use (NaN with none up), and the
    TTFT histogram's cumulative buckets."""
    n = s.ints[N_REPLICAS]
    up = np.flatnonzero(np.isnan(s.removed_at[:n]) & (s.ready_at[:n] <= now))
    kv = kv_used(s)
    kv_max = np.nan
    running = 0.0
    for r in up:
        share = kv[r] / s.params[CAP]
        if np.isnan(kv_max) or share > kv_max:
            kv_max = share
        running += s.running[r]
    return s.queued[up].astype(np.float64), running, kv_max, np.cumsum(s.ttft_counts)


@_compiled
def nearest_rank_by_group(values: np.ndarray, groups: np.ndarray, count: int, q: float) -> np.ndarray:
    """The ``q`` quantile (nearest rank) of the ``values`` of each group ``0 .. count - 1``, whose members are
    consecutive (``groups`` does not fall); NaN for a group with none. Each group sorted alone: a run's requests by
    the tick they arrived in, where sorting them all by both keys took most of a second."""
    result = np.full(count, np.nan)
    i, n = 0, len(values)
    while i < n:
        j = i
        while j < n and groups[j] == groups[i]:
            j += 1
        result[groups[i]] = np.sort(values[i:j])[int(np.ceil(q * (j - i))) - 1]
        i = j
    return result


@_compiled
def route(s: FleetArrays, now: float) -> None:
    """Send the arrivals not yet routed to the replicas that take traffic at ``now`` (up, not draining), if any.

    Least-waiting routing picks, for each request in order, the replica with the fewest waiting, then the least KV
    cache in use, then the fewest running, then the lowest index (only the waiting counts change while a step's
    arrivals are routed: admission comes after); round-robin takes them in turn."""
    n = s.ints[N_REPLICAS]
    candidates = np.empty(n, dtype=np.int64)
    taking = 0
    for r in range(n):
        if np.isnan(s.removed_at[r]) and np.isnan(s.draining_since[r]) and s.ready_at[r] <= now:
            candidates[taking] = r
            taking += 1
    if taking == 0:
        return
    first, last = s.ints[ROUTED], s.ints[NEXT_ARRIVAL]
    if s.params[ROUND_ROBIN_ROUTING] > 0.0:
        for request in range(first, last):
            enqueue(s, candidates[s.ints[ROUND_ROBIN] % taking], request)
            s.ints[ROUND_ROBIN] += 1
    elif last > first:
        kv = kv_used(s)
        for request in range(first, last):
            best = candidates[0]
            for c in range(1, taking):
                r = candidates[c]
                if s.queued[r] != s.queued[best]:
                    better = s.queued[r] < s.queued[best]
                elif kv[r] != kv[best]:
                    better = kv[r] < kv[best]
                else:
                    better = s.running[r] < s.running[best]
                if better:
                    best = r
            enqueue(s, best, request)
    s.ints[ROUTED] = last


@_compiled
def take_admissions(s: FleetArrays, now: float) -> tuple[np.ndarray, np.ndarray]:
    """Take each replica's waiting requests from the head of its queue while its batch has room and its KV cache
    has free blocks for the request's context (a request alone is admitted whatever its size): the replicas and
    the requests admitted, in that order."""
    n = s.ints[N_REPLICAS]
    total = 0
    for r in range(n):
        total += s.queued[r]
    replicas = np.empty(total, dtype=np.int64)
    requests = np.empty(total, dtype=np.int64)
    taken = 0
    if total == 0:
        return replicas, requests
    kv = kv_used(s)
    cap, max_seqs, block = s.params[CAP], s.params[MAX_SEQS], s.params[BLOCK]
    for r in range(n):
        if not np.isnan(s.removed_at[r]) or s.queued[r] == 0 or s.ready_at[r] > now:
            continue
        while s.queued[r] > 0 and s.running[r] < max_seqs:
            request = s.head[r]
            need = held(s.context[request], block)
            if s.running[r] > 0 and kv[r] + need > cap:
                break
            s.head[r] = s.link[request]
            s.queued[r] -= 1
            s.running[r] += 1
            kv[r] += need
            replicas[taken] = r
            requests[taken] = request
            taken += 1
    return replicas[:taken], requests[:taken]


@_compiled
def _count(values: np.ndarray, edges: np.ndarray, counts: np.ndarray) -> None:
    """Count each of ``values`` in its bucket of ``edges`` (the first edge at or above it; then ``+Inf``)."""
    for value in values:
        counts[np.searchsorted(edges, value)] += 1.0


@_compiled
def _preempt_overflow(s: FleetArrays, kv: np.ndarray) -> None:
    """Where a replica's running requests hold more KV blocks (``kv``) than its cache has, preempt the newest until
    they fit (vLLM V1's recompute preemption): each frees its blocks and goes back to the head of its replica's
    queue, to prefill its prompt and generated tokens again and decode the rest."""
    cap, block = s.params[CAP] + 1e-9, s.params[BLOCK]
    over = False
    for r in range(s.ints[N_REPLICAS]):
        over = over or kv[r] > cap
    if not over:
        return
    n = s.ints[N_RUNNING]
    drop = np.zeros(n, dtype=np.bool_)
    for r in range(s.ints[N_REPLICAS]):
        if kv[r] <= cap:
            continue
        total = kv[r]
        for k in range(n - 1, -1, -1):
            if s.columns.rep[k] != r:
                continue
            if total <= cap or s.running[r] <= 1:
                break
            request = s.columns.req[k]
            total -= held(s.columns.ctx[k], block)
            drop[k] = True
            s.running[r] -= 1
            requeue(s, r, request)
            s.ints[PREEMPTIONS] += 1
            s.preemptions[r] += 1
            if s.columns.pre[k] <= 0.0:  # its first token is out: it resumes with what it has generated
                s.preempted[request] = True
                s.context[request] = s.columns.ctx[k]
                s.to_prefill[request] = s.columns.ctx[k]
                s.to_decode[request] = s.columns.dec[k]
    s.ints[N_RUNNING] = compact(drop, s.columns)


@_compiled
def _advance(s: FleetArrays, now: float, end: float) -> None:
    """One step of every replica's engine (``engine.engine_step``); then the first tokens are counted (vLLM's TTFT
    histogram, its token counters), the requests done leave (their prompts counted in its prompt-length histogram)
    and a replica whose cache the new tokens overflow preempts its newest."""
    n, dt, c = s.ints[N_RUNNING], s.params[DT], s.columns
    rep, req = c.rep[:n], c.req[:n]
    done, frac, generated, leaving, kv = engine_step(
        now, dt, rep, c.pre[:n], c.dec[:n], c.start[:n], c.ctx[:n], c.chunk[:n], s.step_end[: s.ints[N_REPLICAS]],
        s.ints[N_REPLICAS], s.params[WEIGHT_READ], s.params[KV_READ], s.params[FLOPS], s.params[BUDGET],
        s.params[BLOCK],
    )  # fmt: skip
    s.sums[GENERATION_TOKENS] += generated
    ttft, prompts, left, left_prompts = settle(
        done, frac, leaving, now, dt, end, rep, req, s.preempted, s.first_token, s.arrival, s.prompt, s.finished
    )
    if len(ttft):
        _count(ttft, s.ttft_edges, s.ttft_counts)
        s.sums[TTFT_SUM] += pairwise_sum(ttft)
        s.sums[PROMPT_TOKENS] += pairwise_sum(prompts)
        s.sums[GENERATION_TOKENS] += float(len(ttft))
    if len(left):  # their batch slots and KV cache are free
        _count(left_prompts, s.prompt_edges, s.prompt_counts)
        s.ints[LEFT] += len(left)
        for r in left:
            s.running[r] -= 1
        s.ints[N_RUNNING] = compact(leaving, s.columns)
    _preempt_overflow(s, kv)


@_compiled
def abort(s: FleetArrays, replica: int, at: float) -> None:
    """Remove ``replica`` at ``at`` with what it holds: its running and waiting requests are dropped."""
    n = s.ints[N_RUNNING]
    mine = np.zeros(n, dtype=np.bool_)
    dropped = 0
    for k in range(n):
        if s.columns.rep[k] == replica:
            mine[k] = True
            s.dropped[s.columns.req[k]] = True
            dropped += 1
    if dropped:
        s.ints[LEFT] += dropped
        s.ints[N_RUNNING] = compact(mine, s.columns)
    request = s.head[replica]
    for _ in range(s.queued[replica]):
        s.dropped[request] = True
        request = s.link[request]
    s.ints[LEFT] += s.queued[replica]
    s.queued[replica] = 0
    s.running[replica] = 0
    s.removed_at[replica] = at


@_compiled
def after_admission(s: FleetArrays, replicas: np.ndarray, requests: np.ndarray, now: float) -> bool:
    """The rest of a step from ``now`` once ``requests`` are admitted on ``replicas``: they join the running
    columns, the replicas that exist are paid for, the engines step, and a draining replica left with nothing is
    removed (one past its drain timeout aborted). Returns whether a scrape is due at the step's end."""
    dt = s.params[DT]
    end = now + dt
    if len(requests):
        s.ints[N_RUNNING] = admit(
            replicas, requests, now, s.ints[N_RUNNING], s.columns,
            s.to_prefill, s.to_decode, s.context, s.engine_arrival, s.admitted, s.served_by,
        )  # fmt: skip
    existing = 0
    for r in range(s.ints[N_REPLICAS]):
        existing += np.isnan(s.removed_at[r])
    s.sums[REPLICA_SECONDS] += existing * dt
    if s.ints[N_RUNNING]:
        _advance(s, now, end)
    for r in range(s.ints[N_REPLICAS]):
        if not np.isnan(s.removed_at[r]) or np.isnan(s.draining_since[r]):
            continue
        if s.running[r] + s.queued[r] == 0:
            s.removed_at[r] = end
        elif end - s.draining_since[r] >= s.params[DRAIN_TIMEOUT]:
            abort(s, r, end)
    return bool(end - s.sums[LAST_SCRAPE] >= s.params[SCRAPE_INTERVAL] - 1e-9)


@_compiled
def arrive(s: FleetArrays, now: float) -> None:
    """The requests that reach the engine before the step from ``now`` ends have arrived."""
    s.ints[NEXT_ARRIVAL] = np.searchsorted(s.engine_arrival, now + s.params[DT])


@_compiled
def fleet_step(s: FleetArrays, now: float) -> bool:
    """Advance from ``now`` by a step: arrivals, routing, admission and the rest (``after_admission``). Returns
    whether a scrape is due at its end."""
    arrive(s, now)
    route(s, now)
    replicas, requests = take_admissions(s, now)
    return after_admission(s, replicas, requests, now)


@_compiled
def done(s: FleetArrays) -> bool:
    """Every request has arrived and none is waiting or running."""
    if s.ints[NEXT_ARRIVAL] < len(s.arrival) or s.ints[N_RUNNING] or s.ints[ROUTED] < s.ints[NEXT_ARRIVAL]:
        return False
    for r in range(s.ints[N_REPLICAS]):  # noqa: SIM110 (a loop numba compiles)
        if np.isnan(s.removed_at[r]) and s.queued[r]:
            return False
    return True


@_compiled
def needs_python(s: FleetArrays, now: float) -> bool:
    """Whether the step from ``now`` routes or admits, which with prefix caching only Python does: a request
    reaches the engine by its end or waits at the router, or a replica has requests waiting."""
    if s.ints[ROUTED] < s.ints[NEXT_ARRIVAL]:
        return True
    arrived = s.ints[NEXT_ARRIVAL]
    if arrived < len(s.engine_arrival) and s.engine_arrival[arrived] < now + s.params[DT]:
        return True
    for r in range(s.ints[N_REPLICAS]):  # noqa: SIM110 (a loop numba compiles)
        if s.queued[r]:
            return True
    return False


@_compiled
def run_steps(
    s: FleetArrays, now: float, tick_at: float, end: float, tail_end: float, check_every: int, prefix: bool
) -> tuple[float, bool]:
    """Step from ``now`` until the caller has something to do: a scrape is due (returned true), the controller's
    tick at ``tick_at`` is due, a whole ``check_every`` seconds is reached, the last arrival (``end``) is passed, the
    run is over (past ``end``, every request done or ``tail_end`` reached), or, with ``prefix`` caching, the next
    step routes or admits (``needs_python``; the first step must not). Returns where it stopped."""
    dt = s.params[DT]
    past_end = now > end
    while True:
        scrape = fleet_step(s, now)
        now += dt
        if scrape or now >= tick_at - 1e-9 or int(now) % check_every == 0:
            return now, scrape
        if now > end and (not past_end or done(s) or now >= tail_end):
            return now, False
        if prefix and needs_python(s, now):
            return now, False


@_compiled
def replay_bench(
    s: FleetArrays, schedule: np.ndarray, limit: int, gap: float, overhead: float, give_up: float
) -> float:
    """Step a fleet of one replica through a benchmark's requests from time 0 until all have left, as ``vllm bench
    serve`` sends them: each at its time in ``schedule``, once fewer than ``limit`` are in flight, and ``gap`` after
    the one before (its arrival, and the engine's ``overhead`` after it, are set then). Returns the time it
    stopped: past ``give_up`` if the replica had not finished by then. Its scrapes are not kept: nothing reads them."""
    n, dt = len(schedule), s.params[DT]
    sent, now, sent_at = 0, 0.0, -np.inf
    while s.ints[LEFT] < n:
        while sent < n and schedule[sent] <= now + dt and sent - s.ints[LEFT] < limit:
            sent_at = max(schedule[sent], now, sent_at + gap)
            s.arrival[sent] = sent_at
            s.engine_arrival[sent] = sent_at + overhead
            sent += 1
        fleet_step(s, now)
        now += dt
        if now > give_up:
            break
    return now
