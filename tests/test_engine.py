"""The replicas' engines (``simulations.engine``): whole engine steps while prompts wait, each taking one token
of every decoding sequence and chunks of the prompts first come, first served within its token budget, its
tokens out when it ends; decoding alone at the batch's and the context's cost; the same compiled or not. The
running requests' columns: admission writes into them, a step's first tokens and finished requests are recorded,
those that leave are compacted away, in order."""

from __future__ import annotations

import numpy as np
import pytest

from simulations.engine import COMPILED, RunningColumns, admit, compact, engine_step, settle
from simulations.replica_model import ReplicaModel

MODEL = ReplicaModel()
DT = 1.0
W = MODEL.weight_read_s
FLOPS = MODEL.prefill_tokens_per_s
BUDGET = float(MODEL.max_num_batched_tokens)
CONSTANTS = (W, MODEL.kv_read_s_per_token, FLOPS, BUDGET, float(MODEL.kv_block_tokens))


class Engine:
    """Running requests on ``replicas`` replicas, advanced call by call as ``Fleet`` advances them."""

    def __init__(self, rep: list[int], pre: list[float], dec: list[float], start: list[float], replicas: int = 1):
        self.rep = np.asarray(rep, dtype=np.int64)
        self.pre, self.dec, self.start = (np.asarray(a, dtype=float) for a in (pre, dec, start))
        self.ctx = self.pre.copy()
        self.chunk = np.zeros(len(rep))
        self.step_end = np.full(replicas, -np.inf)
        self.replicas = replicas
        self.first_token = np.full(len(rep), np.nan)

    def call(self, now: float, dt: float = DT, constants: tuple[float, ...] = CONSTANTS) -> tuple[float, list[bool]]:
        done, frac, generated, out, _ = engine_step(
            now, dt, self.rep, self.pre, self.dec, self.start, self.ctx, self.chunk, self.step_end, self.replicas,
            *constants,
        )  # fmt: skip
        self.first_token[done] = now + frac * dt
        return generated, out.tolist()


def test_prompts_sent_together_have_their_first_token_together_when_the_step_ends() -> None:
    """Four prompts of 16,384 tokens at 2,400 tokens a second in a budget of 65,536 (the docstring's example):
    one step, not four prompts one after another."""
    constants = (0.03, 0.0, 2400.0, 65_536.0, 16.0)
    engine = Engine([0] * 4, [16_384.0] * 4, [100.0] * 4, [0.0] * 4)
    for now in range(0, 40, 5):
        engine.call(float(now), 5.0, constants)
    assert engine.first_token.tolist() == pytest.approx([0.03 + 65_536 / 2400] * 4)


def test_prompts_are_chunked_first_come_first_served_within_the_budget() -> None:
    """Prompts of 300, 200 and 3,000 tokens on an idle built-in replica (2,048 tokens a step): the first step
    holds the first two and 1,548 of the third, and ends after a weight read and 2,048 tokens' compute; the
    next holds the two now decoding and the third's 1,452 tokens left."""
    engine = Engine([0, 0, 0], [300.0, 200.0, 3000.0], [10.0] * 3, [0.0] * 3)
    first_end = W + 2048 / FLOPS
    engine.call(0.0)
    engine.call(1.0)
    assert np.isnan(engine.first_token).all() and engine.pre.tolist() == [300.0, 200.0, 3000.0]
    generated, _ = engine.call(2.0)
    assert engine.first_token[:2].tolist() == pytest.approx([first_end] * 2) and np.isnan(engine.first_token[2])
    assert engine.pre.tolist() == pytest.approx([0.0, 0.0, 1452.0]) and generated == 0.0
    second = W + MODEL.kv_read_s_per_token * 500 + (2 + 1452) / FLOPS
    engine.call(2.0 + DT, first_end + second - 2.0 - DT)  # to the second step's end
    assert engine.first_token[2] == pytest.approx(first_end + second)
    assert engine.dec.tolist() == pytest.approx([9.0, 9.0, 10.0])  # a token each from the second step


def test_a_prompt_that_arrives_during_a_step_waits_for_the_next() -> None:
    engine = Engine([0, 0], [1000.0, 100.0], [1.0, 1.0], [0.0, 0.5])
    for now in range(3):
        engine.call(float(now))
    first_end = W + 1000 / FLOPS
    second = W + MODEL.kv_read_s_per_token * 1000 + (1 + 100) / FLOPS  # the first decodes in it, reading its cache
    assert engine.first_token.tolist() == pytest.approx([first_end, first_end + second])


def test_decoding_alone_costs_a_weight_read_the_batch_and_the_context_read() -> None:
    """Two sequences of 1,000 and 3,000 cached tokens decode ``1 / (weights + 2 / flops + kv x 4,000)`` tokens
    each in a second; one with a single token left generates it and is out."""
    engine = Engine([0, 0, 0], [0.0] * 3, [500.0, 500.0, 1.0], [0.0] * 3)
    engine.ctx[:] = [1000.0, 3000.0, 10.0]
    generated, out = engine.call(0.0)
    iterations = DT / (W + 3 / FLOPS + MODEL.kv_read_s_per_token * 4010)
    assert out == [False, False, True]
    assert engine.dec.tolist() == pytest.approx([500 - iterations, 500 - iterations, 0.0])
    assert engine.ctx.tolist() == pytest.approx([1000 + iterations, 3000 + iterations, 11.0])
    assert generated == pytest.approx(2 * iterations + 1)


def test_the_cache_held_is_the_blocks_of_those_that_stay() -> None:
    """What ``Fleet.kv_used`` works out after the call: whole blocks of the requests that did not finish (the
    second replica's step, a 3,000-token prompt's first chunk, is still under way)."""
    rep = np.array([0, 0, 1, 1])
    ctx = np.array([1000.0, 17.0, 5.0, 40.0])
    _, _, _, out, kv = engine_step(
        0.0, DT, rep, np.array([0.0, 0.0, 3000.0, 0.0]), np.array([100.0, 0.5, 3.0, 100.0]), np.zeros(4), ctx,
        np.zeros(4), np.full(3, -np.inf), 3, *CONSTANTS,
    )  # fmt: skip
    assert out.tolist() == [False, True, False, False]  # half a token left: it is out
    assert kv.tolist() == pytest.approx(
        [float((np.ceil(ctx[:1] / 16) * 16).sum()), 16.0 + float((np.ceil(ctx[3:] / 16) * 16).sum()), 0]
    )


def _steps_by_loop(rep: np.ndarray, pre: np.ndarray, start: np.ndarray, replicas: int) -> np.ndarray:
    """Each prompt's first token when nothing decodes, one engine step after another on each replica: a step
    starts when the last ends (or the next prompt arrives), takes the prompts admitted by then first come, first
    served within the budget, and ends after a weight read and its tokens' compute."""
    first = np.full(len(pre), np.nan)
    for r in range(replicas):
        mine = [k for k in range(len(pre)) if rep[k] == r]
        left = {k: float(pre[k]) for k in mine}
        t = 0.0
        while left:
            ready = [k for k in mine if k in left and start[k] <= t]
            if not ready:
                t = min(float(start[k]) for k in left)
                continue
            room, chunks = BUDGET, {}
            for k in ready:
                if room <= 0:
                    break
                chunks[k] = min(left[k], room)
                room -= chunks[k]
            t += W + sum(chunks.values()) / FLOPS
            for k, c in chunks.items():
                left[k] -= c
                if left[k] <= 1e-9:
                    del left[k]
                    first[k] = t
    return first


def test_prefill_in_steps_agrees_with_a_loop() -> None:
    """Replicas that decode nothing (one-token outputs), with prompts of every size arriving over ten seconds,
    advanced in calls of every length."""
    rng = np.random.default_rng(7)
    for _ in range(100):
        n, replicas = int(rng.integers(1, 40)), int(rng.integers(1, 6))
        rep = rng.integers(0, replicas, n)
        pre = rng.choice([1.0, 5.0, 2048.0], n) if rng.random() < 0.3 else rng.exponential(1500.0, n) + 1.0
        start = np.sort(np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * 10.0))
        expected = _steps_by_loop(rep, pre, start, replicas)
        engine = Engine(rep.tolist(), pre.tolist(), [0.0] * n, start.tolist(), replicas)
        now = 0.0
        while np.isnan(engine.first_token).any():
            dt = float(rng.choice([0.02, 0.3, 1.0, 4.0]))
            engine.call(now, dt)
            now += dt
        assert engine.first_token == pytest.approx(expected, abs=1e-9)


@pytest.mark.skipif(not COMPILED, reason="numba is not installed: only the interpreted step runs")
def test_the_compiled_step_is_the_interpreted_one() -> None:
    """numba's machine code and the interpreter give the same figures, so a fleet simulates the same with or
    without the ``[sim]`` extra."""
    rng = np.random.default_rng(11)
    for _ in range(50):
        n, replicas = int(rng.integers(1, 400)), int(rng.integers(1, 30))
        args = [
            rng.integers(0, replicas, n),
            np.where(rng.random(n) < 0.3, rng.exponential(800.0, n), 0.0),
            rng.exponential(200.0, n),
            rng.random(n) * 1.2,
            rng.exponential(2000.0, n),
            np.zeros(n),
            np.where(rng.random(replicas) < 0.5, rng.random(replicas) * 2.0, -np.inf),
        ]
        outcomes = []
        for step in (engine_step, engine_step.__wrapped__):
            copies = [a.copy() for a in args]
            returned = step(0.0, DT, *copies, replicas, *CONSTANTS)
            outcomes.append([*(np.asarray(x).tolist() for x in returned), *(c.tolist() for c in copies)])
        assert outcomes[0] == outcomes[1]


@pytest.mark.skipif(not COMPILED, reason="numba is not installed: nothing is compiled")
def test_without_a_writable_cache_the_step_is_compiled_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba refuses ``cache=True`` where it finds nowhere to write (a read-only install and home): the step is
    compiled without its cache, not left to fail the run."""
    import numba

    from simulations.engine import _compiled

    real = numba.njit

    def nowhere_to_cache(*args: object, **options: object) -> object:
        if options.get("cache"):
            raise RuntimeError("cannot cache function: no locator available for file")
        return real(*args, **options)

    monkeypatch.setattr(numba, "njit", nowhere_to_cache)
    step = _compiled(engine_step.__wrapped__)
    done, *_ = step(0.0, 5.0, np.array([0]), np.array([100.0]), np.array([1.0]), np.zeros(1), np.array([100.0]),
                    np.zeros(1), np.full(1, -np.inf), 1, *CONSTANTS)  # fmt: skip
    held = dict(zip(step.__code__.co_freevars, (cell.cell_contents for cell in step.__closure__ or ()), strict=True))
    assert done.tolist() == [0] and type(held["dispatcher"]).__name__ == "CPUDispatcher"  # compiled, uncached


def test_admission_writes_after_the_running_and_records_the_first_admission_alone() -> None:
    """Two requests admitted at 10 s behind one running: the one that reaches its replica at 10.4 s is admitted
    then, not at the step's start; a request preempted before keeps its first admission (at 3 s)."""
    columns = RunningColumns.empty(4)
    columns.req[0], columns.rep[0] = 7, 1
    to_prefill, to_decode, context = (
        np.array([0.0, 300.0, 50.0]),
        np.array([0.0, 20.0, 9.0]),
        np.array([0.0, 300.0, 80.0]),
    )
    engine_arrival, admitted, served_by = np.array([0.0, 10.4, 2.0]), np.array([np.nan, np.nan, 3.0]), np.full(3, -1)
    running = admit(np.array([0, 2]), np.array([1, 2]), 10.0, 1, columns, to_prefill, to_decode, context,
                    engine_arrival, admitted, served_by)  # fmt: skip
    assert running == 3
    assert columns.req[:3].tolist() == [7, 1, 2] and columns.rep[:3].tolist() == [1, 0, 2]
    assert columns.start[1:3].tolist() == [10.4, 10.0] and admitted[1:].tolist() == [10.4, 3.0]
    assert columns.pre[1:3].tolist() == [300.0, 50.0] and columns.ctx[1:3].tolist() == [300.0, 80.0]
    assert columns.dec[1:3].tolist() == [20.0, 9.0] and served_by.tolist() == [-1, 0, 2]


def test_the_columns_compact_in_order_and_grow_with_what_they_hold() -> None:
    columns = RunningColumns.empty(2)
    columns.req[:2] = [5, 6]
    grown = columns.grown(2, 3)
    assert len(grown.req) == 4 and grown.req[:2].tolist() == [5, 6]
    grown.req[:4] = [5, 6, 8, 9]
    grown.ctx[:4] = [1.0, 2.0, 3.0, 4.0]
    kept = compact(np.array([False, True, False, False]), RunningColumns(*(c[:4] for c in grown)))
    assert kept == 3 and grown.req[:3].tolist() == [5, 8, 9] and grown.ctx[:3].tolist() == [1.0, 3.0, 4.0]


def test_settling_a_step_counts_fresh_first_tokens_and_the_requests_that_leave() -> None:
    """Of two prompts done at 0.25 and 0.5 of a 2 s step from 10 s, the one preempted after its first token
    (request 1) has none again; request 0's first token is at 10.5 s, 10.5 - 9 after it arrived. Request 2
    leaves at the step's end, its replica and prompt returned."""
    rep, req = np.array([0, 1, 1]), np.array([0, 1, 2])
    preempted, first_token = np.array([False, True, False]), np.array([np.nan, 4.0, 3.0])
    arrival, prompt, finished = np.array([9.0, 1.0, 0.5]), np.array([100.0, 200.0, 300.0]), np.full(3, np.nan)
    ttft, prompts, left, left_prompts = settle(np.array([0, 1]), np.array([0.25, 0.5]), np.array([False, False, True]),
                                               10.0, 2.0, 12.0, rep, req, preempted, first_token, arrival, prompt,
                                               finished)  # fmt: skip
    assert ttft.tolist() == [1.5] and prompts.tolist() == [100.0] and first_token.tolist() == [10.5, 4.0, 3.0]
    assert left.tolist() == [1] and left_prompts.tolist() == [300.0] and finished[2] == 12.0


@pytest.mark.skipif(not COMPILED, reason="numba is not installed: only the interpreted passes run")
def test_the_compiled_columns_passes_are_the_interpreted_ones() -> None:
    """Admission, settling and compaction, compiled and interpreted, on random columns: the same figures."""
    rng = np.random.default_rng(5)
    requests = 1000
    for _ in range(30):
        n, m = int(rng.integers(0, 300)), int(rng.integers(0, 40))
        base = RunningColumns.empty(n + m)
        for column in base:
            column[:] = rng.integers(0, requests, n + m) if column.dtype == np.int64 else rng.random(n + m)
        per_request = [rng.random(requests) * 100 for _ in range(5)]  # prefill, decode, context, arrival, prompt
        admitted = np.where(rng.random(requests) < 0.5, np.nan, 1.0)
        reps, reqs = rng.integers(0, 20, m), rng.choice(requests, m, replace=False)
        drop, preempted = rng.random(n + m) < 0.3, rng.random(requests) < 0.2
        done = rng.choice(n + m, min(n + m, 5), replace=False).astype(np.int64)
        frac = rng.random(len(done))
        outcomes = []
        for passes in ((admit, settle, compact), (admit.__wrapped__, settle.__wrapped__, compact.__wrapped__)):
            columns = RunningColumns(*(c.copy() for c in base))
            prefill, decode, context, arrival, prompt = (a.copy() for a in per_request)
            first, served, first_token, finished = (
                admitted.copy(),
                np.full(requests, -1),
                *np.full((2, requests), np.nan),
            )
            running = passes[0](reps, reqs, 5.0, n, columns, prefill, decode, context, arrival, first, served)
            settled = passes[1](done, frac, drop, 5.0, 1.0, 6.0, columns.rep[:running], columns.req[:running],
                                preempted, first_token, arrival, prompt, finished)  # fmt: skip
            kept = passes[2](drop, RunningColumns(*(c[:running] for c in columns)))
            outcomes.append([running, kept, *settled, *columns, first, served, first_token, finished])
        for compiled, interpreted in zip(*outcomes, strict=True):
            np.testing.assert_array_equal(compiled, interpreted)


@pytest.mark.skipif(not COMPILED, reason="numba is not installed: nothing is compiled")
def test_warming_compiles_what_a_fleets_steps_call() -> None:
    """``warm`` (before ``simulate`` forks its workers) compiles every compiled function for the types a fleet calls
    them with: a fleet's steps after it, many a call, one a call, with prefix caching and scaled in, add no compiled
    version, so a forked worker compiles nothing."""
    import math

    from simulations import engine
    from simulations.fleet import Fleet, warm
    from tests.helpers import poisson_trace

    compiled = [f for f in vars(engine).values() if callable(getattr(f, "jitted", None))]

    def versions() -> list[int]:
        return [len(f.jitted().signatures) for f in compiled]

    warm()
    warmed = versions()
    fleet = Fleet(ReplicaModel(kv_cache_tokens=20_000), poisson_trace(3.0, 200, 900, 60), 2)
    now = 0.0
    while now < 60.0:
        now = fleet.advance(now, math.inf, 60.0, 3600.0, 60)
    for _ in range(60):
        fleet.step(now)
        now += 1.0
    fleet.scale_to(1, now)
    assert fleet.preemptions > 0 and np.isfinite(fleet.finished).any()  # every pass has been called
    assert versions() == warmed


def test_the_totals_are_added_as_numpy_adds_them() -> None:
    """``pairwise_sum`` gives ``ndarray.sum`` to the bit, below eight values, in blocks of eight and halved past 128:
    the TTFT histogram's sum and the token counters are then those the Python steps made."""
    from simulations.engine import pairwise_sum

    rng = np.random.default_rng(7)
    for n in [*range(0, 300), 511, 1024, 1031, 4096, 10_007]:
        for values in (rng.lognormal(0.0, 3.0, n), rng.exponential(1.0, n) * 1e-3):
            assert pairwise_sum(values) == float(values.sum())
