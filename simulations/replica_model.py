"""Parameters of the simulated vLLM replica and cluster, with defaults from public numbers.

The defaults model the design article's workload: Llama-3-70B-Instruct in FP8, tensor parallel over the
four NVIDIA A10G (24 GB) of an AWS g5.12xlarge, vLLM with ``--gpu-memory-utilization=0.92``:

* ``kv_cache_tokens`` 30,000: 4 x 24 GB x 0.92 = 88 GB, less about 71 GB of FP8 weights and about 6 GB of
  activations and CUDA graphs, leaves about 9.4 GB; an FP16 KV cache of Llama-3-70B takes
  2 x 80 layers x 8 KV heads x 128 x 2 bytes = 320 KiB per token.
* ``prefill_tokens_per_s`` 1,000: 2 x 70.6 G FLOP per token against 4 x 125 TFLOP/s of FP16 tensor cores at
  about 30 % utilisation over PCIe tensor parallelism.
* ``decode_tokens_per_s`` 20 (one sequence's speed at batch 1): 71 GB of weights read per step over
  4 x 600 GB/s at about 70 % efficiency, plus two all-reduces per layer over PCIe: about 50 ms a token.
* ``max_num_batched_tokens`` 2,048: the token budget of one engine step (vLLM's chunked-prefill default).
* ``max_num_seqs`` 256, vLLM's default; on this hardware the KV cache is the binding limit.

* ``kv_read_s_per_token`` 0.2 us: attention reads every running sequence's KV cache once an engine step,
  320 KiB a token over 4 x 600 GB/s at about 70 % efficiency; 6 ms a step with the whole cache in use.
* ``kv_block_tokens`` 16, vLLM's ``--block-size``.
* ``request_overhead_s`` 0.05: HTTP, tokenisation and scheduling before the engine sees a request (30 to
  200 ms measured on cached prompts; ``calibrate`` fits it).

One engine step (continuous batching with chunked prefill, vLLM V1's scheduler) costs
``weight_read_s + tokens / prefill_tokens_per_s + kv_read_s_per_token x context``: it reads the weights once
(``1 / decode_tokens_per_s - 1 / prefill_tokens_per_s``), computes every token in the step (one per
decoding sequence plus chunks of pending prefill, within ``max_num_batched_tokens``), and reads the KV cache
of every decoding sequence (its prompt and the tokens it has generated). So a sequence alone decodes at
``decode_tokens_per_s`` on a short context, and slower in a big batch, on long contexts, or beside a long
prefill. Pending prefill is served first come, first served: the oldest admitted prompt takes the step's
room before the next one. A step's tokens come out when it ends: the prompts it completes have their first
token together, and a prompt that arrives during a step waits for the next (``simulations/engine.py``). A
request is admitted while the batch has room (``max_num_seqs``) and the KV cache has free blocks for its
prompt; its cache then grows a token per output token, and when the cache runs out the newest running
request is preempted (its blocks freed, recomputed later), as vLLM V1 does. Each parameter and how to
measure it: ``docs/simulation.md``; ``vllm-autoscaler calibrate`` fits them to ``vllm bench serve`` results.
* ``prefix_caching`` on, as in vLLM's V1 engine: a replica keeps the KV blocks of the prompts it has
  prefilled, as many as its cache holds (``kv_cache_tokens``), the least recently used going first, and
  prefills only what follows the longest prefix it holds. It matters only for traces that record their
  prompts' prefix blocks (Mooncake's ``hash_ids``); with ``prefix_caching=0`` every prompt is prefilled
  in full.
* ``routing`` least-waiting, the design article's router (the fewest waiting requests, then the least KV
  cache reserved); or round-robin; or prefix-aware, a cache-aware router such as llm-d's or SGLang's (the
  replica holding the longest prefix of the prompt, among those within two waiting requests of the least
  busy; least-waiting for a trace without prefix blocks).
* ``gpus_per_replica`` 4, so ``gpu_hours`` = replica-hours x 4.
* scrape every 15 s, staleness 300 s (Prometheus's default lookback); a removed replica drains (vLLM
  ``--shutdown-timeout`` with a matching ``terminationGracePeriodSeconds`` of 300 s) unless ``drain`` is 0.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from policies.policy_file import DEFAULT_COLD_START_SECONDS
from policies.spec import StrictModel


class ReplicaModel(StrictModel):
    name: str = "Llama-3-70B-Instruct FP8, TP=4 on 4x A10G (AWS g5.12xlarge), vLLM"
    max_num_seqs: int = Field(default=256, ge=1)
    kv_cache_tokens: float = Field(default=30_000, gt=0)
    prefill_tokens_per_s: float = Field(default=1_000.0, gt=0)
    decode_tokens_per_s: float = Field(default=20.0, gt=0, description="per sequence, at batch size 1")
    kv_read_s_per_token: float = Field(default=2.0e-7, ge=0, description="an engine step's read of one cached token")
    kv_block_tokens: int = Field(default=16, ge=1)
    request_overhead_s: float = Field(default=0.05, ge=0, description="per request, before the engine sees it")
    max_num_batched_tokens: int = Field(default=2048, ge=1)
    gpus_per_replica: int = Field(default=4, ge=1)
    cold_start_s: float = Field(default=float(DEFAULT_COLD_START_SECONDS), ge=0)
    scrape_interval_s: float = Field(default=15.0, gt=0)
    staleness_s: float = Field(default=300.0, gt=0)
    routing: Literal["least-waiting", "round-robin", "prefix-aware"] = "least-waiting"
    prefix_caching: bool = True
    drain: bool = True
    drain_timeout_s: float = Field(default=300.0, ge=0)
    step_s: float = Field(default=1.0, gt=0, le=10)
    hpa_sync_s: float = Field(default=15.0, gt=0, description="the HPA cycle of the KEDA baselines")

    @model_validator(mode="after")
    def _parameters_agree(self) -> ReplicaModel:
        if self.decode_tokens_per_s >= self.prefill_tokens_per_s:
            raise ValueError("decode_tokens_per_s must be below prefill_tokens_per_s (a step reads the weights once)")
        if self.staleness_s < self.scrape_interval_s:
            raise ValueError(
                f"staleness_s ({self.staleness_s:g}) must be at least scrape_interval_s ({self.scrape_interval_s:g}): "
                "every sample would go stale before the next scrape, leaving the policies without metrics"
            )
        return self

    @property
    def weight_read_s(self) -> float:
        """The fixed cost of one engine step: reading the weights."""
        return 1.0 / self.decode_tokens_per_s - 1.0 / self.prefill_tokens_per_s

    def decode_rate(self, batch: float, context: float = 0.0) -> float:
        """Tokens per second of one sequence in a decode-only batch of ``batch`` sequences, each of which
        holds ``context`` tokens in the KV cache."""
        batch = max(batch, 1.0)
        step = self.weight_read_s + batch / self.prefill_tokens_per_s + self.kv_read_s_per_token * batch * context
        return 1.0 / step

    def sequences_held(self, request_tokens: float) -> float:
        """How many requests of ``request_tokens`` (prompt and output) a replica runs at once: its
        ``max_num_seqs``, or as many as its KV cache fits if fewer."""
        return min(float(self.max_num_seqs), self.kv_cache_tokens / max(request_tokens, 1.0))

    @property
    def idle_prefill_tokens_per_s(self) -> float:
        """The prompt tokens an idle replica prefills a second in full engine steps (``engine_prefill_s`` of a
        step's budget, inverted): what ``errorBudget.prefillTokensPerSecond`` tells the policy of this replica."""
        return self.max_num_batched_tokens / float(self.engine_prefill_s(np.array(float(self.max_num_batched_tokens))))

    def engine_prefill_s(self, prompt: np.ndarray) -> np.ndarray:
        """How long an idle engine takes to prefill ``prompt`` tokens: their compute, plus a weight read for
        every engine step of ``max_num_batched_tokens`` it takes (chunked prefill)."""
        steps = np.ceil(prompt / self.max_num_batched_tokens)
        time: np.ndarray = steps * self.weight_read_s + prompt / self.prefill_tokens_per_s
        return time

    def idle_prefill_s(self, prompt: np.ndarray) -> np.ndarray:
        """A request's time to first token on an idle replica: the fixed ``request_overhead_s`` and its
        prompt's ``engine_prefill_s``. The part of a request's time to first token that no policy can remove,
        which the SLO does not hold against it."""
        time: np.ndarray = self.request_overhead_s + self.engine_prefill_s(prompt)
        return time

    def latest_finish_s(self, output: np.ndarray) -> np.ndarray:
        """The longest a request can take from its first token to its last: one token per engine step, and
        the longest step computes a full chunk of prefill or a full batch beside the weight read."""
        compute = max(self.max_num_batched_tokens, self.max_num_seqs) / self.prefill_tokens_per_s
        step = self.weight_read_s + compute + self.kv_read_s_per_token * self.kv_cache_tokens
        time: np.ndarray = output * step
        return time

    def min_work_s(self, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
        """The least replica time a request can take: its tokens' compute, plus its share of weight reads
        in the largest batch there can be."""
        compute = (prompt + output) / self.prefill_tokens_per_s
        work: np.ndarray = compute + output * self.weight_read_s / self.max_num_seqs
        return work


def first_problem(exc: ValidationError, whole: str) -> str:
    """A validation error's first problem as ``field: reason`` (``whole`` where it concerns no one field)."""
    first = exc.errors()[0]
    where = ".".join(map(str, first["loc"])) or whole
    reason = "missing" if first["type"] == "missing" else first["msg"].removeprefix("Value error, ")
    return f"{where}: {reason}"


def parse_overrides(pairs: list[str], base: ReplicaModel | None = None) -> ReplicaModel:
    """``KEY=VALUE`` options onto the defaults; a bad key or value raises ``ValueError`` naming it."""
    data: dict[str, Any] = (base or ReplicaModel()).model_dump()
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in ReplicaModel.model_fields:
            known = ", ".join(sorted(ReplicaModel.model_fields))
            raise ValueError(f"--replica {pair!r}: expected KEY=VALUE with KEY one of {known}")
        data[key] = value.strip()
    try:
        return ReplicaModel.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"--replica {first_problem(exc, 'settings')}") from None
