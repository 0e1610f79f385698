"""One step of every replica's engine over a fleet's running requests, compiled by numba where it is installed
(the ``[sim]`` extra): the one loop the simulator makes every simulated second, over some hundreds of running
requests, where numpy's fixed cost per call had been most of a step (docs/decisions/simulator-speed.md).
Without numba the interpreter runs the same code, three to four times slower (the built-in day: 19 s against 4.6)."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])
SIM_EXTRA = "pip install 'vllm-autoscaler[sim]'"  # what installs numba, and matplotlib for the plots
COMPILED = importlib.util.find_spec("numba") is not None


def _compiled(function: F) -> F:
    """``function`` compiled by numba at its first call and cached on disk beside this file (or in the user's cache
    where that is read-only; compiled anew each process where neither is writable), or as written without numba.
    Compiled when first called, not when imported: numba and LLVM (some 60 MiB) are loaded only by a process that
    steps a fleet, not by one that only reads the simulator's modules (the bench's daemon beside it)."""
    if not COMPILED:
        return function
    dispatcher: Callable[..., Any] | None = None

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        nonlocal dispatcher
        if dispatcher is None:
            import numba

            try:
                dispatcher = numba.njit(cache=True, nogil=True)(function)
            except RuntimeError:  # numba found no writable place for its cache: a second of compiling, every run
                dispatcher = numba.njit(nogil=True)(function)
        return dispatcher(*args)

    return cast(F, call)


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
            kv[rep[k]] += np.ceil(ctx[k] / block) * block
    return done[:completed], frac[:completed], generated, out, kv


RUNNING_CAPACITY = 256  # a fleet's running requests' columns at first; they double when admission outgrows them


class RunningColumns(NamedTuple):
    """A fleet's running requests, one entry each in their order of admission on each replica, the first so many
    (``Fleet.n_running``) of each column: the replica, the request, its prompt tokens left to prefill, its tokens
    left to decode, when it was admitted, its tokens in the KV cache and its prompt tokens in the engine step under
    way (``engine_step``'s arrays). Preallocated: admission writes into them and a request that leaves is compacted
    away, where arrays made anew at each step cost most of a step (docs/decisions/simulator-speed.md). The compiled
    passes take them one array a parameter, as ``engine_step`` does: numba unboxes the tuple itself more slowly (a
    fixed fleet on two days of traffic, 11.5 s against 10.8)."""

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
    rep: np.ndarray,
    req: np.ndarray,
    pre: np.ndarray,
    dec: np.ndarray,
    start: np.ndarray,
    ctx: np.ndarray,
    chunk: np.ndarray,
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
        rep[k], req[k], pre[k], dec[k] = reps[j], r, to_prefill[r], to_decode[r]
        start[k], ctx[k], chunk[k] = at, context[r], 0.0
    return n + len(reqs)


@_compiled
def compact(
    drop: np.ndarray,
    rep: np.ndarray,
    req: np.ndarray,
    pre: np.ndarray,
    dec: np.ndarray,
    start: np.ndarray,
    ctx: np.ndarray,
    chunk: np.ndarray,
) -> int:
    """Take the running requests ``drop`` marks (one entry each of the first ``len(drop)``) out of the columns, the
    others kept in order at their start. Returns how many are kept."""
    w = 0
    for k in range(len(drop)):
        if drop[k]:
            continue
        if w != k:
            rep[w], req[w], pre[w], dec[w] = rep[k], req[k], pre[k], dec[k]
            start[w], ctx[w], chunk[w] = start[k], ctx[k], chunk[k]
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


def warm() -> None:
    """Compile the step and its passes now (or load them from numba's cache), on a fleet of one request: what a
    process does before it forks workers, so that they inherit the machine code rather than each compile it
    (about 3 s on two cores, the same work twice) while they cannot yet hear that their run is no longer wanted."""
    if not COMPILED:
        return
    one, none, nothing, flag = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(1, bool)
    columns = RunningColumns.empty(1)
    a, b, c, d, e = (np.zeros(1) for _ in range(5))
    admit(one, one, 0.0, 0, *columns, a, b, c, d, e, one.copy())
    engine_step(0.0, 1.0, columns.rep, *columns[2:], np.full(1, -np.inf), 1, 0.03, 0.0, 1000.0, 2048.0, 16.0)
    settle(none, nothing, flag, 0.0, 1.0, 1.0, columns.rep, columns.req, flag, a, b, c, d)
    compact(flag, *columns)
