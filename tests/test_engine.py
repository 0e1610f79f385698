"""One step of the replicas' engines (``simulations.engine``): prompts prefilled first come, first served
within the step, decoding at the batch's and the context's cost, the same compiled or not."""

from __future__ import annotations

import numpy as np
import pytest

from simulations.engine import COMPILED, engine_step
from simulations.replica_model import ReplicaModel

MODEL = ReplicaModel()
DT = 1.0
BUDGET = float(MODEL.max_num_batched_tokens)
CONSTANTS = (
    MODEL.weight_read_s, MODEL.kv_read_s_per_token, MODEL.prefill_tokens_per_s, BUDGET, float(MODEL.kv_block_tokens)
)  # fmt: skip


def _step(
    rep: list[int], pre: list[float], dec: list[float], start: list[float], ctx: list[float], replicas: int = 1
) -> tuple[list[int], list[float], float, list[bool], np.ndarray, np.ndarray, np.ndarray]:
    """``engine_step`` of the built-in replica from 0 for a second: what it returns, then the updated arrays."""
    arrays = [np.asarray(a, dtype=float) for a in (pre, dec, start, ctx)]
    done, frac, generated, out, _ = engine_step(
        0.0, DT, np.asarray(rep, dtype=np.int64), arrays[0], arrays[1], arrays[2], arrays[3], replicas, *CONSTANTS
    )
    return done.tolist(), frac.tolist(), generated, out.tolist(), arrays[0], arrays[1], arrays[3]


def _prefill_rate(pending: float) -> float:
    """Prompt tokens a second of a replica that decodes nothing and holds ``pending`` of them: full engine steps
    of ``BUDGET`` tokens, each a weight read besides their compute; or, if they all fit, all of them."""
    it_full = DT / (MODEL.weight_read_s + BUDGET / MODEL.prefill_tokens_per_s)
    it_all = max(DT - pending / MODEL.prefill_tokens_per_s, 0.0) / MODEL.weight_read_s
    fits = pending / MODEL.prefill_tokens_per_s < DT and pending <= it_all * BUDGET + 1e-9
    return max(pending, it_full * BUDGET) if fits else min(it_full * BUDGET, pending)


def _in_order_by_loop(
    rep: np.ndarray, pre: np.ndarray, start: np.ndarray, rate: dict[int, float]
) -> tuple[list[float], list[float]]:
    """First come, first served one prompt after another: each starts when it is admitted and the one before it
    on its replica is done, at its replica's ``rate``; what each receives, and when it finishes (2.0 if not)."""
    received, frac = [0.0] * len(pre), [2.0] * len(pre)
    free_at: dict[int, float] = {}
    for k in range(len(pre)):
        r = int(rep[k])
        begin = max(float(start[k]), free_at.get(r, 0.0))
        finish = begin + float(pre[k]) / rate[r]
        free_at[r] = finish
        if finish <= 1.0 + 1e-12:
            received[k], frac[k] = float(pre[k]), finish
        else:
            received[k] = min(max(1.0 - begin, 0.0) * rate[r], float(pre[k]))
    return received, frac


def test_prompts_are_prefilled_first_come_first_served() -> None:
    """Three prompts of 300, 200 and 3,000 tokens on an idle replica: the first finishes at 300 / rate of the
    step, the second after it at 500 / rate, the third takes the rest of the step and is not done."""
    prompts = [300.0, 200.0, 3000.0]
    done, frac, generated, out, pre, _, _ = _step([0, 0, 0], prompts, [10, 10, 10], [0, 0, 0], prompts)
    rate = _prefill_rate(3500.0)
    assert done == [0, 1] and frac == pytest.approx([300 / rate, 500 / rate])
    assert pre.tolist() == pytest.approx([0.0, 0.0, 3000 - (rate - 500)])
    assert generated == 0.0 and out == [False, False, False]  # a prompt in prefill at the step's start decodes later


def test_a_prompt_that_does_not_finish_holds_back_those_after_it() -> None:
    done, _, _, _, pre, _, _ = _step([0, 0], [50_000, 10], [1, 1], [0, 0], [50_000, 10])
    assert done == [] and pre[1] == 10.0 and 50_000 - pre[0] == pytest.approx(_prefill_rate(50_010.0))


def test_a_prompt_admitted_inside_the_step_starts_then() -> None:
    done, frac, *_ = _step([0], [100], [1], [0.5], [100])
    assert done == [0] and frac[0] == pytest.approx(0.5 + 100 / _prefill_rate(100.0))


def test_decoding_costs_a_weight_read_the_batch_and_the_context_read() -> None:
    """Two sequences of 1,000 and 3,000 cached tokens decode ``1 / (weights + 2 / flops + kv x 4,000)`` tokens
    each in a second; one with a single token left generates it and is out."""
    done, _, generated, out, _, dec, ctx = _step([0, 0, 0], [0, 0, 0], [500, 500, 1], [0, 0, 0], [1000, 3000, 10])
    iterations = DT / (MODEL.weight_read_s + 3 / MODEL.prefill_tokens_per_s + MODEL.kv_read_s_per_token * 4010)
    assert done == [] and out == [False, False, True]
    assert dec.tolist() == pytest.approx([500 - iterations, 500 - iterations, 0.0])
    assert ctx.tolist() == pytest.approx([1000 + iterations, 3000 + iterations, 11.0])
    assert generated == pytest.approx(2 * iterations + 1)


def test_the_cache_held_is_the_blocks_of_those_that_stay() -> None:
    """What ``Fleet.kv_used`` works out after the step: whole blocks of the requests that did not finish."""
    rep = np.array([0, 0, 1, 1])
    ctx = np.array([1000.0, 17.0, 5.0, 40.0])
    _, _, _, out, kv = engine_step(
        0.0,
        DT,
        rep,
        np.array([0.0, 0.0, 30.0, 0.0]),
        np.array([100.0, 0.5, 3.0, 100.0]),
        np.zeros(4),
        ctx,
        3,
        *CONSTANTS,
    )
    assert out.tolist() == [False, True, False, False]  # half a token left: it is out
    assert kv.tolist() == pytest.approx(
        [float(MODEL.blocks(ctx[:1]).sum()), 16.0 + float(MODEL.blocks(ctx[3:]).sum()), 0]
    )


def test_prefill_in_order_agrees_with_a_loop() -> None:
    """Replicas that decode nothing, with prompts of every size, some admitted inside the step."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        n, replicas = int(rng.integers(1, 60)), int(rng.integers(1, 8))
        rep = rng.integers(0, replicas, n)
        pre = rng.choice([0.5, 1.0, 2.0, 5.0], n) if rng.random() < 0.3 else rng.exponential(300.0, n) + 0.01
        start = np.where(rng.random(n) < 0.5, 0.0, rng.random(n))
        rate = {r: _prefill_rate(float(pre[rep == r].sum())) for r in range(replicas)}
        expected_received, expected_frac = _in_order_by_loop(rep, pre, start, rate)
        prompts = pre.tolist()
        done, frac, _, _, left, _, _ = _step(rep.tolist(), prompts, [1.0] * n, start.tolist(), prompts, replicas)
        assert (pre - left).tolist() == pytest.approx(expected_received, abs=1e-6)
        finished = [k for k in range(n) if expected_frac[k] <= 1.0 + 1e-12]
        assert done == finished and frac == pytest.approx([expected_frac[k] for k in finished], abs=1e-9)


@pytest.mark.skipif(not COMPILED, reason="numba is not installed: only the interpreted step runs")
def test_the_compiled_step_is_the_interpreted_one() -> None:
    """numba's machine code and the interpreter give the same figures, so a fleet simulates the same with or
    without the ``[sim]`` extra."""
    rng = np.random.default_rng(11)
    for _ in range(50):
        n, replicas = int(rng.integers(1, 400)), int(rng.integers(1, 30))
        args = [
            np.sort(rng.integers(0, replicas, n)),
            np.where(rng.random(n) < 0.3, rng.exponential(800.0, n), 0.0),
            rng.exponential(200.0, n),
            rng.random(n) * 1.2,
            rng.exponential(2000.0, n),
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
    done, *_ = step(0.0, DT, np.array([0]), np.array([100.0]), np.array([1.0]), np.zeros(1), np.array([100.0]), 1,
                    *CONSTANTS)  # fmt: skip
    held = dict(zip(step.__code__.co_freevars, (cell.cell_contents for cell in step.__closure__ or ()), strict=True))
    assert done.tolist() == [0] and type(held["dispatcher"]).__name__ == "CPUDispatcher"  # compiled, uncached
