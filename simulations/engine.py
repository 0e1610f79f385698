"""One step of every replica's engine over a fleet's running requests, compiled by numba where it is installed
(the ``[sim]`` extra): the one loop the simulator makes every simulated second, over some hundreds of running
requests, where numpy's fixed cost per call had been most of a step (docs/decisions/simulator-speed.md).
Without numba the interpreter runs the same code, three to four times slower (the built-in day: 19 s against 4.6)."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any, TypeVar, cast

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
