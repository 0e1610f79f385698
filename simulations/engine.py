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
    replicas: int,
    weight_read_s: float,
    kv_read_s_per_token: float,
    flops: float,
    budget: float,
    block: float,
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """Advance every replica's engine from ``now`` by ``dt``: the running requests, one entry each in their
    order of admission on their replica (``rep``), each with its prompt tokens left to prefill (``pre``),
    tokens left to decode (``dec``), the moment it was admitted (``start``) and its tokens in the KV cache
    (``ctx``). ``pre``, ``dec`` and ``ctx`` are updated in place.

    A replica runs ``iterations`` engine steps, each reading its weights (``weight_read_s``) and its decoding
    sequences' KV cache (``kv_read_s_per_token``), and computing one token per decoding sequence and a chunk
    of prefill within the step's ``budget`` of tokens (``flops`` a second). Either all its pending prefill fits
    beside the decodes, and the steps after it are decode-only, or every step is full. Its prompts are
    prefilled first come, first served at that rate, each from its admission, and one that does not finish
    holds back those after it (vLLM V1's chunked prefill); ``tests/test_engine.py`` holds this to a loop of
    one prompt after another. A request prefilling at the step's start does not decode in it.

    Returns the positions of the prompts whose prefill completed, the fraction of the step at which each did
    (2.0 where it completed only to within rounding), the tokens generated, which requests have no token left
    to generate, and the KV-cache tokens each replica holds for the others, in whole ``block``s (what
    ``Fleet.kv_used`` works out once they have left).
    """
    n = len(rep)
    prefilling = pre > 0
    context = np.zeros(replicas)
    batch = np.zeros(replicas)
    pending = np.zeros(replicas)
    for k in range(n):
        if prefilling[k]:
            pending[rep[k]] += pre[k]
        else:
            context[rep[k]] += ctx[k]
            batch[rep[k]] += 1.0
    iterations = np.empty(replicas)
    rate = np.zeros(replicas)
    for r in range(replicas):
        weights = weight_read_s + kv_read_s_per_token * context[r]
        iterations[r] = dt / (weights + batch[r] / flops)
        if pending[r] <= 0:
            continue
        room = max(budget - batch[r], 0.0)
        pending_s = pending[r] / flops
        it_all = max(dt - pending_s, 0.0) / (weights + batch[r] / flops)
        fits = pending_s < dt and pending[r] <= it_all * room + 1e-9
        it_full = dt / (weights + min(batch[r] + room, max(budget, batch[r])) / flops)
        iterations[r] = it_all if fits else it_full
        tokens = pending[r] if fits else min(it_full * room, pending[r])
        # Prefill runs at the full-step rate while it lasts; when it all fits it simply ends early.
        rate[r] = max(max(tokens, it_full * room) if fits else tokens, 1e-12)
    free = np.zeros(replicas)  # the fraction of the step at which each replica's prefill is free for the next prompt
    held = np.zeros(replicas, dtype=np.bool_)  # a prompt of the replica did not finish: those after it wait
    out = np.zeros(n, dtype=np.bool_)
    done = np.empty(n, dtype=np.int64)
    frac = np.empty(n)
    count = 0
    for k in range(n):
        r = rep[k]
        if not prefilling[k] or held[r]:
            continue
        late = (start[k] - now) / dt
        begin = free[r] if free[r] > late else (late if late < 1.0 else 1.0)
        free[r] = begin + pre[k] / rate[r]
        finished = free[r] <= 1.0 + 1e-12
        pre[k] = 0.0 if finished else pre[k] - min(max(1.0 - begin, 0.0) * rate[r], pre[k])
        if pre[k] <= 1e-9:
            out[k] = dec[k] <= 1e-9
            done[count] = k
            frac[count] = free[r] if finished else 2.0
            count += 1
        if not finished:
            held[r] = True
    generated = 0.0
    kv = np.zeros(replicas)
    for k in range(n):
        if not prefilling[k]:
            tokens = min(iterations[rep[k]], dec[k])
            generated += tokens
            dec[k] -= tokens
            ctx[k] += tokens
            out[k] = dec[k] <= 1e-9
        if not out[k]:
            kv[rep[k]] += np.ceil(ctx[k] / block) * block
    return done[:count], frac[:count], generated, out, kv
