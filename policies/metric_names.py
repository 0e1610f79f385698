"""The built-in metric names: the one catalogue that the policy file's schema, the default PromQL queries
(``autoscaler.metrics.queries``) and the simulated replicas' signals (``simulations.runner``) all read.

A metric with one of these names may leave out its ``query``; any other name needs one (docs/contract.md).
"""

from __future__ import annotations

KV_CACHE = "kv_cache_usage_perc"
KV_CACHE_ALIASES = (KV_CACHE, "gpu_cache_usage_perc")  # vLLM before 0.12 named it gpu_cache_usage_perc
TTFT_P90 = "time_to_first_token_p90_seconds"
TTFT_SLO = "time_to_first_token_slo_seconds"
"""The TTFT quantile at a workload's ``slo.target`` over the last minute, from the histogram the p90 reads: not
a metric a file scales on, but what ``predictive`` learns a replica's capacity by
(``policies.predictive.capacity``), read for a workload with a ``capacity`` block that learns."""

WAITING = "num_requests_waiting"
GENERATION_TOKENS = "generation_tokens_per_second"
TTFT_SECONDS_RATE = "time_to_first_token_seconds_per_second"
FIRST_TOKENS_RATE = "first_tokens_per_second"
FIRST_TOKENS_OVER_SLO = "first_tokens_over_slo_per_second"
"""The rate of first tokens over the last minute whose TTFT is above the largest edge of the TTFT histogram at or
below the slo's ``ttftSeconds`` (``histogram.count_above``; 1.0 s for a 2 s SLO): every miss is among them, so the
budget counts no more misses than this (``policies.predictive.budget``)."""
BUDGET_SIGNALS = (TTFT_SECONDS_RATE, FIRST_TOKENS_RATE, "prompt_tokens_per_second", FIRST_TOKENS_OVER_SLO)
"""What the error budget is counted from (``policies.predictive.budget``): the rates of the TTFT histogram's
``_sum`` and ``_count`` over the last minute, the prompt tokens', and the first tokens above the SLO's bucket edge;
not metrics a file scales on, but read for a workload whose ``predictive`` policy has an ``errorBudget``."""
WORK_SIGNALS = ("prompt_tokens_per_second", GENERATION_TOKENS, WAITING, FIRST_TOKENS_RATE)
"""What a follower of the work reads (``policies.predictive.utilization``): the tokens the fleet processed over the
last minute, its waiting requests and its first tokens, for a ``predictive`` policy with a ``utilization`` block."""

PROMPT_SPREAD = "prompt_length_sigma"
"""The spread of the last hour's prompt lengths, the standard deviation of their log, read as lognormal from vLLM's
``vllm:request_prompt_tokens`` histogram (``histogram.lognormal_spread``): read for a budget whose
``promptLengthSigma`` is not given (``policies.predictive.budget.prefill_tail``)."""
PROMPT_SPREAD_WINDOW_S = 3600
"""The last hour's prompts: thousands at a request a second, where a minute's hundred leave the tail to chance."""

BUILTIN_METRIC_NAMES = (
    "num_requests_waiting",
    "num_requests_running",
    *KV_CACHE_ALIASES,
    TTFT_P90,
    "prompt_tokens_per_second",
    "generation_tokens_per_second",
)

ACTIVITY_METRICS = ("num_requests_running", "num_requests_waiting", "prompt_tokens_per_second")
"""Their sum says whether a request is in any replica of a workload that may go to zero (``policies.activation``):
the daemon, ``record`` and the simulator all read it from these."""


def canonical(name: str) -> str:
    """The name an alias stands for (``gpu_cache_usage_perc`` is ``kv_cache_usage_perc``)."""
    return KV_CACHE if name in KV_CACHE_ALIASES else name


def described() -> str:
    """The names as a list for a message: ``a, b, kv_cache_usage_perc (gpu_cache_usage_perc), ...``."""
    names = [n for n in BUILTIN_METRIC_NAMES if canonical(n) == n]
    return ", ".join(f"{n} ({', '.join(KV_CACHE_ALIASES[1:])})" if n == KV_CACHE else n for n in names)


def blind_to_prefill(names: list[str]) -> bool:
    """Whether a workload's only signals are waiting requests and the KV cache's usage (the design article's
    pair). With a large ``max_num_seqs`` every request is admitted at once, so nothing waits while the time to
    first token grows inside the batch, and the KV gauge is the busiest replica's reservation: neither sees
    prefill load, where prompt tokens per second does (docs/decisions/default-signals.md)."""
    return bool(names) and {canonical(n) for n in names} <= {"num_requests_waiting", KV_CACHE}
