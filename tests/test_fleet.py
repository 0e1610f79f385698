"""The simulated fleet (``simulations.fleet``): processor sharing, admission, scrapes and the light-load shortcut."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simulations.fleet import Fleet, share_processor
from simulations.replica_model import ReplicaModel
from simulations.runner import slo_met
from simulations.traces import Trace
from tests.helpers import drain, poisson_trace


def test_processor_sharing_water_fills() -> None:
    received, frac = share_processor(
        np.array([0, 0, 0, 1, 1]), np.array([1.0, 5.0, 2.0, 3.0, 10.0]), np.array([6.0, 4.0])
    )
    assert received.tolist() == [1.0, 3.0, 2.0, 2.0, 2.0]
    assert frac[0] == pytest.approx(0.5) and frac[2] == pytest.approx(5 / 6) and (frac[[1, 3, 4]] > 1).all()


def test_processor_sharing_in_python_gives_numpys_results_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small steps water-fill in plain Python (``_share_small``); the figures the README prints were made
    with the numpy arithmetic, so the two must agree exactly, ties and zero demands included."""
    import simulations.fleet as fleet_module

    rng = np.random.default_rng(7)
    for _ in range(2_000):
        n, groups = int(rng.integers(2, fleet_module.SMALL_SHARE + 1)), int(rng.integers(1, 10))
        group = rng.integers(0, groups, n)
        if rng.random() < 0.3:
            demand = rng.choice([0.0, 0.5, 1.0, 2.0, 5.0], n)
        else:
            demand = rng.exponential(500.0, n)
        capacity = rng.exponential(800.0, groups)
        small = share_processor(group, demand, capacity)
        monkeypatch.setattr(fleet_module, "SMALL_SHARE", 0)
        vectorised = share_processor(group, demand, capacity)
        monkeypatch.undo()
        assert small[0].tobytes() == vectorised[0].tobytes() and small[1].tobytes() == vectorised[1].tobytes()


@pytest.mark.parametrize(("rate", "prompt"), [(0.25, 2000), (0.4, 2000), (0.8, 1000)])
def test_a_fixed_replica_matches_processor_sharing_queueing(rate: float, prompt: int) -> None:
    """Prefill-only requests on one replica form an M/D/1 processor-sharing queue: mean sojourn S/(1-rho)."""
    model = ReplicaModel(kv_cache_tokens=1e9)
    fleet = Fleet(model, poisson_trace(rate, 20_000, prompt, 1), 1)
    drain(fleet)
    service = model.weight_read_s * np.ceil(prompt / model.max_num_batched_tokens) + prompt / model.prefill_tokens_per_s
    expected = service / (1 - rate * service)
    assert float(np.nanmean(fleet.first_token - fleet.arrival)) == pytest.approx(expected, rel=0.10)


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


def test_a_lone_request_takes_its_own_prefill() -> None:
    model = ReplicaModel()
    fleet = Fleet(model, Trace("one", np.array([0.0, 100.5]), np.array([10, 4000]), np.array([1, 10])), 1)
    drain(fleet)
    assert fleet.first_token[1] - fleet.arrival[1] == pytest.approx(model.idle_prefill_s(np.array(4000.0)), abs=1e-6)
    assert fleet.admitted[1] == fleet.arrival[1]  # it arrived inside a step, to an idle replica: no wait


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
    # A steady load: the minute's quantiles, read from buckets 2.5 s apart there, about the run's own p90.
    exact = float(np.quantile(ttft, 0.9))
    assert middle and 0.75 * exact < float(np.median(middle)) < 1.25 * exact, (exact, np.median(middle))
    assert np.isnan(seen[-1][1])  # a minute and more after the last first token
    assert histogram_quantile(0.9, {1.0: 0.0, 2.5: 10.0, float("inf"): 10.0}) == 1.0 + 1.5 * 0.9


def test_the_kv_gauge_shows_what_is_reserved() -> None:
    model = ReplicaModel(kv_cache_tokens=10_000)
    fleet = Fleet(model, Trace("kv", np.array([0.0]), np.array([4000]), np.array([1000])), 1)
    for i in range(20):
        fleet.step(float(i))
    scrape = fleet.latest_scrape(20.0)
    assert scrape is not None and scrape.kv_max == pytest.approx(0.5)


@pytest.mark.parametrize("chunk", [2048, 256])
def test_the_light_load_shortcuts_step_exactly_as_the_general_step(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """A step that only decodes and a step with one prompt in prefill take shortcuts (most steps of a
    light load); with both turned off, every step goes the general way, and every figure is the same
    to the bit."""
    rng = np.random.default_rng(3)
    n = 400
    trace = Trace(
        "light",
        np.sort(rng.uniform(0, 1800, n)),
        rng.integers(50, 6000, n),
        rng.integers(1, 400, n),
    )
    model = ReplicaModel(max_num_batched_tokens=chunk, kv_cache_tokens=20_000)

    def figures() -> list[Any]:
        fleet = Fleet(model, trace, 3)
        drain(fleet)
        return [
            fleet.first_token.tolist(),
            fleet.finished.tolist(),
            fleet.admitted.tolist(),
            fleet.prompt_tokens_total,
            fleet.generation_tokens_total,
            fleet.replica_seconds,
        ]

    shortcuts = figures()
    monkeypatch.setattr(Fleet, "_only_decoding", lambda self, end: False)
    monkeypatch.setattr(
        Fleet,
        "_prefill_alone",
        lambda self, now, dt, end, i, prefilling: self._prefill_shared(now, dt, end, np.array([i]), prefilling),
    )
    general = figures()
    assert shortcuts == general
    assert np.isfinite(shortcuts[1]).all()  # every request finished: the run exercised the decode too


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
