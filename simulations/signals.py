"""What a simulated fleet shows a policy: each built-in metric as its default query would read it from the
simulated replicas' scrapes, and what KEDA's Prometheus scaler handed the HPA."""

from __future__ import annotations

import math
from collections.abc import Callable

from policies.activation import replica_activity
from policies.metric_names import (
    ACTIVITY_METRICS,
    FIRST_TOKENS_OVER_SLO,
    FIRST_TOKENS_RATE,
    KV_CACHE_ALIASES,
    PROMPT_SPREAD,
    TTFT_P90,
    TTFT_SECONDS_RATE,
    TTFT_SLO,
    described,
)
from policies.policy_file import Workload
from simulations.fleet import Fleet, Scrape

Signals = Callable[[Fleet, float], dict[str, float | None]]


def _gauge(scrape: Scrape | None, value: Callable[[Scrape], float]) -> float | None:
    """A ``sum``/``max`` over pods: no pods up means an empty result, which is no value."""
    if scrape is None or scrape.up == 0:
        return None
    result = value(scrape)
    return None if math.isnan(result) else result


def _quantile(q: float) -> Callable[[Fleet, float], float | None]:
    """The TTFT ``q`` quantile from the replicas' histograms; none with no pod up, NaN with no first token in
    the window."""

    def read(fleet: Fleet, now: float) -> float | None:
        scrape = fleet.latest_scrape(now)
        if scrape is None or scrape.up == 0:
            return None
        return fleet.ttft_quantile(q, now)

    return read


def _over(seconds: float) -> Callable[[Fleet, float], float | None]:
    return lambda fleet, now: fleet.first_tokens_over(seconds, now)


def builtin_signal(name: str) -> Callable[[Fleet, float], float | None] | None:
    """The value of a built-in metric name of docs/contract.md, as its default query would return it."""
    if name == "num_requests_waiting":
        return lambda f, now: _gauge(f.latest_scrape(now), lambda s: s.waiting)
    if name == "num_requests_running":
        return lambda f, now: _gauge(f.latest_scrape(now), lambda s: s.running)
    if name in KV_CACHE_ALIASES:
        return lambda f, now: _gauge(f.latest_scrape(now), lambda s: s.kv_max)
    if name == TTFT_P90:  # NaN with pods up and no first token in the window, as histogram_quantile gives
        return _quantile(0.9)
    if name == "prompt_tokens_per_second":
        return lambda f, now: f.rate("prompt_tokens_total", now)
    if name == "generation_tokens_per_second":
        return lambda f, now: f.rate("generation_tokens_total", now)
    if name == TTFT_SECONDS_RATE:
        return lambda f, now: f.rate("ttft_sum", now)
    if name == FIRST_TOKENS_RATE:
        return lambda f, now: f.rate("ttft_count", now)
    if name == PROMPT_SPREAD:
        return lambda f, now: f.prompt_spread(now)
    return None


def signals_for(names: list[str], workload: Workload | None = None) -> Signals:
    """The built-in metrics ``names``, and what a policy reads beyond its metrics (``Workload.extra_signals``): the
    TTFT histogram's readings (``TTFT_SLO``, ``FIRST_TOKENS_OVER_SLO``) at what ``workload`` takes of them
    (``Workload.histogram_reading``, as the daemon's queries do)."""
    getters: dict[str, Callable[[Fleet, float], float | None]] = {}
    for name in names:
        getter = builtin_signal(name)
        if name == TTFT_SLO and workload is not None:
            getter = _quantile(workload.histogram_reading(name))
        if name == FIRST_TOKENS_OVER_SLO and workload is not None:
            getter = _over(workload.histogram_reading(name))
        if getter is None:
            raise ValueError(
                f"the simulator cannot provide metric {name!r}: it serves the built-in names {described()}"
            )
        getters[name] = getter
    return lambda fleet, now: {name: get(fleet, now) for name, get in getters.items()}


def keda_signals(average_per_pod: bool) -> Signals:
    """What KEDA's Prometheus scaler hands the HPA for the design article's two triggers.

    An empty result or NaN becomes 0 (``ignoreNullValues``, KEDA's default).
    """

    def read(fleet: Fleet, now: float) -> dict[str, float | None]:
        scrape = fleet.latest_scrape(now)
        up = scrape.up if scrape is not None else 0
        if scrape is None or up == 0:
            return {"waiting": 0.0, "kv": 0.0}
        waiting = scrape.waiting / up if average_per_pod else scrape.waiting
        return {"waiting": waiting, "kv": 0.0 if math.isnan(scrape.kv_max) else scrape.kv_max}

    return read


ZeroSignals = Callable[[Fleet, float], tuple[float | None, float | None]]
"""A workload that may go to zero reads two more values a tick: the activation query's and the replicas'
activity (``policies.activation``)."""


_ACTIVITY = signals_for(list(ACTIVITY_METRICS))


def gateway_activation(fleet: Fleet, now: float) -> tuple[float | None, float | None]:
    """The simulated activation query: the requests the gateway holds open for the model (which has a value
    at zero); and the replicas' activity, the sum of ``ACTIVITY_METRICS`` as the daemon reads them (no value
    while any has none, as without a pod up)."""
    return float(fleet.gateway_open), replica_activity(_ACTIVITY(fleet, now).values())


def keda_activation(fleet: Fleet, now: float) -> tuple[float | None, float | None]:
    """KEDA's view: a trigger is active while its value exceeds its activation threshold; the vLLM trigger's
    waiting requests are 0 with no pod (``ignoreNullValues``), and running requests are in no trigger."""
    scrape = fleet.latest_scrape(now)
    waiting = 0.0 if scrape is None or scrape.up == 0 else scrape.waiting
    return float(fleet.gateway_open), waiting
