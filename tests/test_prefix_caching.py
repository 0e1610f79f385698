"""Prefix caching in the simulated replica: the prompts' blocks as a trace records them, what a replica
holds of them, and what that changes (prefill, the SLO's own-prefill allowance, the oracle, the load test)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulations.fleet import PREFIX_ROUTING_SLACK, Fleet
from simulations.oracle import oracle_bound
from simulations.replica_model import ReplicaModel
from simulations.runner import Contender, run
from simulations.sizing import LoadTest
from simulations.traces import PrefixBlocks, Trace, TraceError, load_trace
from tests.helpers import assert_report_consistent, drain, policy_file

BLOCK = 512
# A replica that prefills a tenant's requests (2,048 tokens of their own, 3,072 of its prefix) within the
# SLO at 1.5 requests a second, once it holds the prefixes.
FAST = ReplicaModel(kv_cache_tokens=200_000, prefill_tokens_per_s=4000, decode_tokens_per_s=40)


def _blocks(*prompts: list[int]) -> PrefixBlocks:
    offsets = np.cumsum([0, *map(len, prompts)]).astype(np.int64)
    ids = np.asarray([b for p in prompts for b in p], dtype=np.int64)
    return PrefixBlocks(offsets, ids, BLOCK)


def _trace(arrivals: list[float], prompts: list[list[int]], output: int = 4) -> Trace:
    """Requests whose prompts are exactly their blocks, full ones."""
    tokens = np.asarray([len(p) * BLOCK for p in prompts], dtype=np.int64)
    return Trace(
        "prefix",
        np.asarray(arrivals, dtype=float),
        tokens,
        np.full(len(prompts), output, dtype=np.int64),
        prefix=_blocks(*prompts),
    )


def _served(trace: Trace, model: ReplicaModel, replicas: int = 1) -> Fleet:
    fleet = Fleet(model, trace, replicas)
    drain(fleet)
    return fleet


def test_mooncake_hash_ids_are_read_with_their_requests(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 2000, "input_length": 700, "output_length": 5, "hash_ids": [1, 7]}\n'
        '{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]}\n'
        '{"timestamp": 1000, "input_length": 30, "output_length": 5}\n'
    )
    trace = load_trace(path)
    assert trace.prompt_tokens.tolist() == [1024, 30, 700]
    assert trace.prefix is not None and trace.prefix.block_tokens == BLOCK
    # Sorted with their requests; a request without hash_ids has no blocks.
    assert [trace.prefix.of(i).tolist() for i in range(3)] == [[1, 2], [], [1, 7]]
    assert load_trace(tmp_path / "t.jsonl").prefix.keys(0) == trace.prefix.keys(0)  # type: ignore[union-attr]


def test_a_trace_without_hash_ids_has_no_blocks(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n')
    assert load_trace(path).prefix is None


@pytest.mark.parametrize("hash_ids", ['"abc"', "[1.5]", "[true]", "{}", "[1e30]"])
def test_bad_hash_ids_name_the_line(tmp_path: Path, hash_ids: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [3]}\n'
        f'{{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": {hash_ids}}}\n'
    )
    with pytest.raises(TraceError, match=r"t\.jsonl:2: not a Mooncake request"):
        load_trace(path)


@pytest.mark.parametrize(
    ("prompts", "tokens", "least"),
    [
        # The same prompt again: all but its last token (always computed) were prefilled before.
        ([[1, 2], [1, 2]], [1024, 1024], [1024, 1]),
        # A shared first block, then another second block.
        ([[1, 2], [1, 3]], [1024, 1024], [1024, 512]),
        # Block 2 after another first block is another prefix: nothing is shared.
        ([[1, 2], [4, 2]], [1024, 1024], [1024, 1024]),
        # A partial last block that matches: the prompt is held up to its last token.
        ([[1, 2], [1, 2]], [1024, 700], [1024, 1]),
        # Longest shared prefix of all the earlier prompts, not only the last one.
        ([[1, 2, 3], [5], [1, 2, 6]], [1536, 512, 1536], [1536, 512, 512]),
    ],
)
def test_least_prefill_counts_the_longest_prefix_seen_before(
    prompts: list[list[int]], tokens: list[int], least: list[int]
) -> None:
    assert _blocks(*prompts).least_prefill(np.asarray(tokens, dtype=float)).tolist() == least


def test_repeated_passes_share_prefixes_within_a_pass_only() -> None:
    blocks = _blocks([1, 2], [1, 3]).repeated(5)
    prompt = np.full(5, 1024.0)
    # Within each pass the second request shares the first's first block; a new pass shares nothing.
    assert blocks.least_prefill(prompt).tolist() == [1024, 512, 1024, 512, 1024]
    assert blocks.head(3).least_prefill(prompt[:3]).tolist() == [1024, 512, 1024]


def test_a_replica_prefills_only_what_follows_the_prefix_it_holds() -> None:
    trace = _trace([0.0, 30.0, 60.0], [[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9, 10]])
    cached = _served(trace, ReplicaModel(kv_cache_tokens=100_000))
    assert cached.computed.tolist() == [2048, 1024, 2048]
    full = _served(trace, ReplicaModel(kv_cache_tokens=100_000, prefix_caching=False))
    assert full.computed.tolist() == [2048, 2048, 2048]
    ttft = lambda fleet: (fleet.first_token - fleet.arrival).tolist()  # noqa: E731
    assert ttft(cached)[1] < 0.6 * ttft(full)[1] and ttft(cached)[2] == pytest.approx(ttft(full)[2])
    # vLLM counts a prompt's cached tokens among its prompt tokens.
    assert cached.prompt_tokens_total == pytest.approx(full.prompt_tokens_total) == 6 * 1024


def test_the_cache_gives_up_a_prompts_tail_before_its_head() -> None:
    """Four blocks of cache: A (1-4) fills it; C (1, 2, 9) evicts A's last block, not its first; A again
    finds its first three."""
    trace = _trace([0.0, 30.0, 60.0], [[1, 2, 3, 4], [1, 2, 9], [1, 2, 3, 4]])
    fleet = _served(trace, ReplicaModel(kv_cache_tokens=4 * BLOCK))
    assert fleet.computed.tolist() == [2048, 512, 512]


def test_each_replica_has_its_own_cache() -> None:
    """Round-robin over two replicas: the repeat lands on the other replica, which holds nothing."""
    trace = _trace([0.0, 30.0, 60.0], [[1, 2], [1, 2], [1, 2]])
    fleet = _served(trace, ReplicaModel(routing="round-robin"), replicas=2)
    assert fleet.computed.tolist() == [1024, 1024, 1]


def _tenants(seed: int = 3, n: int = 1500, rate: float = 1.5) -> Trace:
    """Requests of ten tenants, each with its own six-block system prompt, then two blocks of their own."""
    rng = np.random.default_rng(seed)
    tenant = rng.integers(0, 10, n)
    own = 10_000 + 2 * np.arange(n)
    prompts = [[100 + 10 * int(t) + k for k in range(6)] + [int(own[i]), int(own[i]) + 1] for i, t in enumerate(tenant)]
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    return _trace((arrivals - arrivals[0]).tolist(), prompts, output=100)


def test_the_oracle_stays_a_bound_with_prefix_caching() -> None:
    trace = _tenants()
    model = FAST.model_copy(update={"cold_start_s": 60})
    bound = oracle_bound(trace, model, 1, 2.0, 0.99)
    without = oracle_bound(trace, model.model_copy(update={"prefix_caching": False}), 1, 2.0, 0.99)
    assert bound.gpu_hours < without.gpu_hours
    met = []
    for replicas in range(1, 5):
        result = run(trace, model, Contender("fixed", static=replicas), replicas, 2.0, timeline=False)
        assert result.prefix_cache_hits is not None and 0 < result.prefix_cache_hits <= 0.75
        if result.meets(0.99):
            met.append(result.gpu_hours)
    assert met and bound.gpu_hours <= min(met)


def test_caching_takes_fewer_replicas_to_meet_the_slo() -> None:
    trace = _tenants()
    needed = {}
    for caching in (True, False):
        model = FAST.model_copy(update={"prefix_caching": caching})
        needed[caching] = next(
            n
            for n in range(1, 8)
            if run(trace, model, Contender("fixed", static=n), n, 2.0, timeline=False).meets(0.99)
        )
    assert needed[True] < needed[False]


def test_the_load_test_keeps_the_traces_order_and_repeats_no_prompt() -> None:
    trace = _tenants(n=200)
    model = ReplicaModel(kv_cache_tokens=200_000)
    test = LoadTest.of(model, trace)
    assert test.prefix is not None and len(test.prompts) > trace.requests
    assert test.prompts[: trace.requests].tolist() == trace.prompt_tokens.tolist()
    # The second pass shares no block with the first: a whole prompt is never found again.
    least = test.prefix.least_prefill(test.prompts.astype(float))
    assert (least[trace.requests : 2 * trace.requests] >= 1024).all()
    assert test.at(test.most / 2).prefix is not None
    assert LoadTest.of(model.model_copy(update={"prefix_caching": False}), trace).prefix is None


def test_the_report_says_how_much_the_caches_held(tmp_path: Path) -> None:
    from autoscaler.cli import main
    from simulations.traces import MOONCAKE_BLOCK_TOKENS

    assert MOONCAKE_BLOCK_TOKENS == BLOCK
    path = tmp_path / "t.jsonl"
    trace = _tenants(n=600)
    with path.open("w") as handle:
        for i in range(trace.requests):
            blocks = trace.prefix.of(i).tolist()  # type: ignore[union-attr]
            record = {
                "timestamp": round(float(trace.arrival_s[i]) * 1000),
                "input_length": int(trace.prompt_tokens[i]),
                "output_length": 100,
                "hash_ids": blocks,
            }
            handle.write(json.dumps(record) + "\n")
    out = tmp_path / "r.json"
    args = ["simulate", "--trace", str(path), "--cold-start", "60", "--policy", "predictive", "--out", str(out)]
    assert main([*args, "--replica", "kv_cache_tokens=200000"]) == 0
    data = json.loads(out.read_text())
    assert data["prefix_reuse"] == pytest.approx(0.75 - 10 * 6 / (600 * 8), abs=1e-4)  # less each first prefix
    hits = {r["policy"]: r["prefix_cache_hits"] for r in data["results"] if r["policy"] != "oracle"}
    assert all(0.3 < h <= data["prefix_reuse"] for h in hits.values()), hits
    assert_report_consistent(data)
    # Without caching the trace reuses as much, and the replicas hold none of it (a policy file's workload,
    # so that the built-in one's load tests run once).
    policy = policy_file(tmp_path, maxReplicas=32)
    without = ["--config", str(policy), "--replica", "kv_cache_tokens=200000", "--replica", "prefix_caching=0"]
    assert main([*args, *without]) == 0
    data = json.loads(out.read_text())
    assert data["prefix_reuse"] == pytest.approx(0.7375, abs=1e-4) and data["model"]["prefix_caching"] is False
    assert {r.get("prefix_cache_hits") for r in data["results"] if r["policy"] != "oracle"} == {0.0}
    assert_report_consistent(data)


def test_prefix_aware_routing_sends_a_prompt_where_its_prefix_is() -> None:
    """Two requests at once spread over two replicas; a third that continues the second's prompt goes to
    the second's replica with prefix-aware routing, to the first (a tie, broken by index) without."""
    trace = _trace([0.0, 0.0, 30.0], [[1, 2], [3, 4], [3, 4, 5]])
    blind = _served(trace, ReplicaModel(), replicas=2)
    aware = _served(trace, ReplicaModel(routing="prefix-aware"), replicas=2)
    assert blind.computed.tolist() == [1024, 1024, 1536]
    assert aware.computed.tolist() == [1024, 1024, 512]


def test_prefix_aware_routing_gives_way_to_load() -> None:
    """One sequence a replica, both busy: the replica holding the prefix takes its requests until it has
    ``PREFIX_ROUTING_SLACK`` more waiting than the other, which then takes the next."""
    prompts = [[1], [3, 4], [3, 4, 10], [3, 4, 11], [3, 4, 12], [3, 4, 13]]
    trace = _trace([0.0, 0.0, 10.0, 10.0, 10.0, 10.0], prompts, output=10_000)
    fleet = Fleet(ReplicaModel(routing="prefix-aware", max_num_seqs=1), trace, 2)
    for second in range(12):
        fleet.step(float(second))
    assert PREFIX_ROUTING_SLACK == 2
    assert [list(r.waiting) for r in fleet.replicas] == [[5], [2, 3, 4]]


def test_prefix_aware_routing_without_blocks_is_least_waiting() -> None:
    rng = np.random.default_rng(4)
    arrivals = np.cumsum(rng.exponential(0.5, 400))
    trace = Trace("t", arrivals - arrivals[0], rng.integers(100, 3000, 400), rng.integers(1, 400, 400))
    runs = [_served(trace, ReplicaModel(routing=routing), replicas=3) for routing in ("least-waiting", "prefix-aware")]
    assert np.array_equal(runs[0].first_token, runs[1].first_token)


@pytest.mark.parametrize("routing", ["least-waiting", "prefix-aware"])
def test_no_first_token_comes_sooner_than_its_prefill_allows(routing: str) -> None:
    """Even a prompt that arrives inside a step and is held but for a few tokens waits for those tokens'
    prefill on an idle replica."""
    trace = _tenants(n=400)
    model = FAST.model_copy(update={"routing": routing})
    fleet = _served(trace, model, replicas=2)
    ttft = fleet.first_token - fleet.arrival
    assert (ttft >= model.idle_prefill_s(fleet.computed) - 1e-9).all()
    assert (fleet.computed < fleet.prompt).mean() > 0.5


def test_a_window_of_a_trace_keeps_its_requests_prefix_blocks() -> None:
    trace = _trace([0.0, 10.0, 20.0, 30.0], [[1, 2], [1, 3, 4], [5], [1, 2, 6]])
    part = trace.window(10.0, 30.0)
    assert part.arrival_s.tolist() == [0.0, 10.0]
    assert part.prompt_tokens.tolist() == [3 * BLOCK, BLOCK]
    assert part.prefix is not None and [part.prefix.of(i).tolist() for i in range(2)] == [[1, 3, 4], [5]]
    # The request before the window no longer warms the cache: [1, 3, 4] shares nothing with the window.
    assert part.least_prefill_tokens.tolist() == [3 * BLOCK, BLOCK]
