"""The simulated fleet (``simulations.fleet``): prefill in order, decode cost, admission and preemption, scrapes,
many steps a call, the steps with prefix caching."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from simulations.engine import RUNNING_CAPACITY
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel
from simulations.runner import slo_met
from simulations.traces import PrefixBlocks, Trace
from tests.helpers import drain, poisson_trace


@pytest.mark.parametrize(("rate", "prompt"), [(0.25, 2000), (0.4, 2000), (0.8, 1000)])
def test_a_fixed_replica_matches_first_come_first_served_queueing(rate: float, prompt: int) -> None:
    """Prefill-only requests on one replica form an M/D/1 queue served in order: mean sojourn
    S + rho S / (2 (1 - rho)), after the fixed per-request overhead."""
    model = ReplicaModel(kv_cache_tokens=1e9)
    fleet = Fleet(model, poisson_trace(rate, 20_000, prompt, 1), 1)
    drain(fleet)
    service = model.weight_read_s * np.ceil(prompt / model.max_num_batched_tokens) + prompt / model.prefill_tokens_per_s
    rho = rate * service
    expected = model.request_overhead_s + service + rho * service / (2 * (1 - rho))
    assert float(np.nanmean(fleet.first_token - fleet.arrival)) == pytest.approx(expected, rel=0.10)


def test_a_burst_staggers_its_first_tokens() -> None:
    """Forty prompts of 500 tokens at once on one replica: prefilled in order in engine steps of 2,048 tokens,
    so the first four have their first token together when the first step ends, and the last after all forty:
    the median sits near half the p99."""
    model = ReplicaModel(step_s=0.05)
    fleet = Fleet(model, Trace("burst", np.zeros(40), np.full(40, 500), np.full(40, 2)), 1)
    drain(fleet)
    ttft = fleet.first_token - fleet.arrival
    first_step = model.request_overhead_s + model.weight_read_s + 2048 / model.prefill_tokens_per_s
    assert np.sort(ttft)[:4] == pytest.approx([first_step] * 4, abs=model.step_s)
    assert float(np.sort(ttft)[4]) > first_step + 1.0
    assert 0.4 < float(np.median(ttft)) / float(np.quantile(ttft, 0.99)) < 0.6
    assert np.all(np.diff(fleet.first_token) >= -1e-9)  # in their order of arrival


def test_decoding_slows_with_the_batch_and_the_context_it_reads() -> None:
    """A sequence's decode rate falls with the batch (its tokens' compute) and with the KV cache the step
    reads: a batch of 64 on 2,000-token contexts reads 128k tokens a step."""
    model = ReplicaModel(prefill_tokens_per_s=10_000, decode_tokens_per_s=80, kv_read_s_per_token=1e-7)
    alone, batch, long = model.decode_rate(1), model.decode_rate(64), model.decode_rate(64, context=2_000)
    assert alone > batch > long
    assert 1 / long - 1 / batch == pytest.approx(64 * 2_000 * 1e-7)


def test_a_full_cache_preempts_the_newest_and_loses_nothing() -> None:
    """Prompts are admitted on their own blocks; as their outputs grow the cache runs out and the newest
    running request is preempted, prefilled again later with what it had generated. Every request still
    finishes once, with one first token, and every output token is counted once."""
    model = ReplicaModel(kv_cache_tokens=4_000, kv_block_tokens=16)
    trace = Trace("tight", np.zeros(6), np.full(6, 500), np.full(6, 400))
    fleet = Fleet(model, trace, 1)
    drain(fleet)
    assert fleet.preemptions > 0 and fleet.preempted.any()
    assert np.isfinite(fleet.finished).all() and not fleet.dropped.any()
    assert (fleet.first_token <= fleet.finished).all()
    assert fleet.generation_tokens_total == pytest.approx(float(trace.output_tokens.sum()))
    assert fleet.prompt_tokens_total == pytest.approx(float(trace.prompt_tokens.sum()))
    assert fleet.ttft_counts.sum() == 6


def test_more_running_than_the_columns_first_hold_all_finish_once() -> None:
    """Three times ``RUNNING_CAPACITY`` requests at once on four replicas that hold them all: the running
    requests' columns grow as admission fills them, and every request has one first token and finishes."""
    n = 3 * RUNNING_CAPACITY
    model = ReplicaModel(max_num_seqs=n, kv_cache_tokens=1e9)
    trace = Trace("wide", np.zeros(n), np.full(n, 20), np.full(n, 5))
    fleet = Fleet(model, trace, 4)
    fleet.step(0.0)
    assert fleet.n_running == n and len(fleet.r_req) == n and sorted(fleet.r_req.tolist()) == list(range(n))
    drain(fleet)
    assert np.isfinite(fleet.finished).all() and (fleet.first_token <= fleet.finished).all()
    assert fleet.ttft_counts.sum() == n and fleet.generation_tokens_total == pytest.approx(5.0 * n)


@pytest.mark.parametrize("drain", [True, False])
def test_every_request_completes_or_is_counted_dropped(drain: bool) -> None:
    """Scale-ins in the middle of the load: a request ends exactly once, finished or aborted, never lost;
    draining replicas abort nothing."""
    trace = poisson_trace(2.0, 1_500, 800, 200)
    fleet = Fleet(ReplicaModel(drain=drain, drain_timeout_s=30, cold_start_s=20), trace, 4)
    now = 0.0
    while not fleet.done or now <= trace.arrival_s[-1]:
        if now in (200.0, 500.0):
            fleet.scale_to(1 if now == 200.0 else 4, now)
        fleet.step(now)
        now += fleet.model.step_s
    finished = ~np.isnan(fleet.finished)
    assert (finished ^ fleet.dropped).all()
    assert fleet.dropped.any() != drain
    served = finished | ~np.isnan(fleet.first_token)
    assert (fleet.arrival[served] <= fleet.first_token[served]).all()
    assert (fleet.first_token[finished] <= fleet.finished[finished]).all()


def test_a_replica_draining_past_its_timeout_is_aborted_with_what_it_holds() -> None:
    """Two long requests on two replicas, scaled in to one: the one left draining is removed when its drain timeout
    has passed, its request dropped (counted as left, so the gateway holds none open); the other finishes."""
    trace = Trace("long", np.array([0.0, 0.0]), np.array([500, 500]), np.array([5_000, 5_000]))
    fleet = Fleet(ReplicaModel(drain=True, drain_timeout_s=30), trace, 2)
    now = 0.0
    while now < 10.0:
        fleet.step(now)
        now += 1.0
    fleet.scale_to(1, now)
    draining = [r for r in fleet.live if r.draining_since is not None]
    assert len(draining) == 1 and draining[0].in_flight == 1
    while not fleet.done:
        fleet.step(now)
        now += 1.0
    assert draining[0].removed_at == 40.0  # the end of the first step that ends 30 s after it began to drain
    assert fleet.dropped.sum() == 1 and np.isfinite(fleet.finished).sum() == 1
    assert fleet.gateway_open == 0 and fleet.existing == 1


def test_the_replica_counts_are_those_of_the_replicas_themselves() -> None:
    """Replicas ready, starting, draining and removed: those that exist, those that count toward spec.replicas and
    those of them ready, as one compiled call reads them, are the replicas' own."""
    trace = Trace("long", np.zeros(3), np.array([500, 500, 500]), np.array([5_000, 5_000, 5_000]))
    fleet = Fleet(ReplicaModel(drain=True, drain_timeout_s=30, cold_start_s=60), trace, 3)
    for now in range(10):
        fleet.step(float(now))
    fleet.scale_to(1, 10.0)  # two of three draining
    fleet.scale_to(3, 10.0)  # two starting
    fleet.scale_to(2, 11.0)  # the newest starting one aborted
    now, seen = 11.0, []
    for until in (12.0, 45.0, 75.0):  # before the drain timeout, after it, after the cold start
        while now < until:
            fleet.step(now)
            now += 1.0
        live, active = fleet.live, fleet.active()
        assert fleet.existing == len(live) and fleet.spec_replicas == len(active)
        assert fleet.ready_replicas(now) == sum(r.ready(now) for r in active)
        seen.append((fleet.existing, fleet.spec_replicas, fleet.ready_replicas(now)))
    assert seen == [(4, 2, 1), (2, 2, 1), (2, 2, 2)]


def test_a_lone_request_takes_its_own_prefill() -> None:
    model = ReplicaModel()
    fleet = Fleet(model, Trace("one", np.array([0.0, 100.5]), np.array([10, 4000]), np.array([1, 10])), 1)
    drain(fleet)
    assert fleet.first_token[1] - fleet.arrival[1] == pytest.approx(model.idle_prefill_s(np.array(4000.0)), abs=1e-6)
    # It reached an idle replica inside a step, after the per-request overhead: no wait.
    assert fleet.admitted[1] == fleet.arrival[1] + model.request_overhead_s


def test_a_prompt_longer_than_the_slo_alone_on_an_idle_replica_meets_it() -> None:
    """Chunked prefill reads the weights once per chunk: 2.4 s more than the bare compute for 100k tokens,
    which no policy can remove and so the SLO must not count."""
    model = ReplicaModel()
    fleet = Fleet(model, Trace("long", np.array([0.0, 1.0]), np.array([100_000, 10]), np.array([1, 1])), 2)
    drain(fleet)
    assert fleet.first_token[0] - 100_000 / model.prefill_tokens_per_s > 2.0
    assert slo_met(fleet, 2.0).all()


def test_the_replicas_expose_vllms_ttft_histogram() -> None:
    """Each scrape holds ``vllm:time_to_first_token_seconds_bucket`` over vLLM's own edges: every first token
    so far, counted at or below each edge, and the histogram's ``_sum``; the TTFT p90 is Prometheus's quantile
    of its last minute's increase, NaN once a minute passes without a first token."""
    from policies.histogram import TTFT_BUCKETS, histogram_quantile

    fleet = Fleet(ReplicaModel(), poisson_trace(0.8, 400, 1500, 50), 2)
    now, seen, quiet_since = 0.0, [], None
    while quiet_since is None or now < quiet_since + 90:
        fleet.step(now)
        if (scrape := fleet.latest_scrape(now)) is not None and scrape.at == now:
            seen.append((now, fleet.ttft_quantile(0.9, now)))
        if quiet_since is None and fleet.done:
            quiet_since = now
        now += fleet.model.step_s
    ttft = fleet.first_token - fleet.arrival
    buckets = fleet.latest_scrape(now).ttft_buckets  # type: ignore[union-attr]
    assert buckets == (*(float(np.count_nonzero(ttft <= edge)) for edge in TTFT_BUCKETS), 400.0)
    assert fleet.latest_scrape(now).ttft_sum == pytest.approx(float(ttft.sum()))  # type: ignore[union-attr]
    middle = [q for t, q in seen if 120 < t < fleet.trace.arrival_s[-1]]
    # A steady load: the minute's quantiles, interpolated within vLLM's buckets, fall in the bucket of the
    # run's own p90 (2.5 to 5 s here).
    exact = float(np.quantile(ttft, 0.9))
    bucket = next(i for i, edge in enumerate(TTFT_BUCKETS) if exact <= edge)
    lower, upper = TTFT_BUCKETS[bucket - 1], TTFT_BUCKETS[bucket]
    assert middle and lower < float(np.median(middle)) <= upper, (exact, np.median(middle))
    assert np.isnan(seen[-1][1])  # a minute and more after the last first token
    assert histogram_quantile(0.9, {1.0: 0.0, 2.5: 10.0, float("inf"): 10.0}) == 1.0 + 1.5 * 0.9


def test_the_first_tokens_above_the_slos_edge_are_the_histograms_last_minute() -> None:
    """``first_tokens_over`` is the rate of the last minute's first tokens above vLLM's bucket edge at or below the
    SLO (1.0 s for 2 s), as ``rate(_bucket{le="+Inf"}[1m]) - rate(_bucket{le="1.0"}[1m])`` reads it."""
    fleet = Fleet(ReplicaModel(), poisson_trace(0.8, 400, 1500, 50), 2)
    now, checked = 0.0, 0
    while not fleet.done:
        fleet.step(now)
        if (pair := fleet.window(now)) is not None and pair[1].at == now and now > 60:
            first, last = pair
            inside = (fleet.first_token > first.at) & (fleet.first_token <= last.at)
            slow = np.count_nonzero(inside & (fleet.first_token - fleet.arrival > 1.0))
            assert fleet.first_tokens_over(2.0, now) == pytest.approx(slow / (last.at - first.at))
            checked += slow > 0
        now += fleet.model.step_s
    assert checked > 10


def test_the_kv_gauge_shows_the_blocks_in_use() -> None:
    """The prompt's blocks from admission, and a block more for every 16 tokens it generates."""
    model = ReplicaModel(kv_cache_tokens=10_000)
    fleet = Fleet(model, Trace("kv", np.array([0.0]), np.array([4000]), np.array([1000])), 1)
    for i in range(16):
        fleet.step(float(i))
    scrape = fleet.latest_scrape(16.0)
    generated = fleet.generation_tokens_total
    assert scrape is not None and scrape.at == 16.0 and 150 < generated < 300
    assert scrape.kv_max == pytest.approx(math.ceil((4000 + generated - 1) / 16) * 16 / 1e4)  # whole blocks


def _light_trace(seed: int, n: int = 400, prefix: bool = False) -> Trace:
    """Requests spread over 15 minutes, enough for three replicas with a small cache to preempt now and then; with
    ``prefix``, each prompt's blocks recorded, none shared with another prompt."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(50, 6000, n)
    blocks = None
    if prefix:
        counts = -(-prompts // 16)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        blocks = PrefixBlocks(offsets, np.arange(int(offsets[-1]), dtype=np.int64), 16)
    return Trace("light", np.sort(rng.uniform(0, 900, n)), prompts, rng.integers(1, 400, n), prefix=blocks)


def _figures(fleet: Fleet) -> list[Any]:
    """Every figure a run is judged by, and every counter Prometheus reads."""
    return [
        *fleet.first_token.tolist(),
        *fleet.finished.tolist(),
        *fleet.admitted.tolist(),
        *fleet.ttft_counts.tolist(),
        *fleet.prompt_counts.tolist(),
        fleet.prompt_tokens_total,
        fleet.generation_tokens_total,
        fleet.ttft_sum,
        fleet.replica_seconds,
        fleet.preemptions,
        *[v for s in fleet.scrapes for v in (s.at, s.waiting, s.running, s.kv_max)],
    ]


def _advanced(fleet: Fleet) -> Fleet:
    """``fleet`` run as ``runner.run`` runs it without a controller: many steps a call, until every request is done."""
    now, end = 0.0, float(fleet.trace.arrival_s[-1])
    while now <= end or not fleet.done:
        now = fleet.advance(now, math.inf, end, end + 3600.0, 60)
    return fleet


@pytest.mark.parametrize("chunk", [2048, 256])
def test_many_steps_a_call_are_a_step_a_call(chunk: int) -> None:
    """``Fleet.advance`` runs compiled steps until the run has something to do; stepping a second a call
    (``Fleet.step``) gives every figure the same to the bit."""
    model = ReplicaModel(max_num_batched_tokens=chunk, kv_cache_tokens=20_000)
    trace = _light_trace(3)
    by_step = Fleet(model, trace, 3)
    drain(by_step)
    fleet = _advanced(Fleet(model, trace, 3))
    assert fleet.preemptions > 0 and np.isfinite(fleet.finished).all()  # it preempted, and decoded to the end
    assert _figures(fleet) == pytest.approx(_figures(by_step), rel=0, abs=0, nan_ok=True)


def test_the_steps_with_prefix_caching_are_the_compiled_steps() -> None:
    """With prefix caching a step that routes or admits is the compiled passes called one by one, the prefix
    caches kept between them in Python, and the steps between such steps run many a call: where no prompt shares
    a block with another, every figure is that of the fleet without prefix caching, a step a call or many."""
    model = ReplicaModel(kv_cache_tokens=20_000)
    plain = Fleet(model, _light_trace(5), 3)
    drain(plain)
    for run in (drain, _advanced):
        cached = Fleet(model, _light_trace(5, prefix=True), 3)
        assert cached.prefix is not None
        run(cached)
        assert cached.preemptions > 0
        assert _figures(cached) == pytest.approx(_figures(plain), rel=0, abs=0, nan_ok=True)


def test_the_replicas_expose_vllms_prompt_length_histogram() -> None:
    """Its spread over the last hour, as the daemon's query reads it: none before two scrapes, then that of the
    prompts served (the built-in lengths' spread is 0.5; read off the 1-2-5 buckets, a little more)."""
    from simulations.traces import synthetic_day

    model = ReplicaModel()
    fleet = Fleet(model, synthetic_day(0, 2.0, 1.0), 16)
    assert fleet.prompt_spread(0.0) is None
    now = 0.0
    while now < 1800.0:
        fleet.step(now)
        now += model.step_s
    assert fleet.prompt_spread(now) == pytest.approx(0.52, abs=0.02)
    assert fleet.prompt_spread(now + 7200.0) is None  # no scrape within the hour
