"""The simulated replica's parameters (``simulations.replica_model``)."""

from __future__ import annotations

import pytest

from simulations.replica_model import parse_overrides


def test_replica_overrides() -> None:
    model = parse_overrides(
        ["max_num_seqs=64", "kv_cache_tokens=1e5", "prefill_tokens_per_s=5000", "decode_tokens_per_s=40"]
    )
    assert (model.max_num_seqs, model.kv_cache_tokens, model.prefill_tokens_per_s) == (64, 1e5, 5000)
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_overrides(["warp_drive=1"])
    with pytest.raises(ValueError, match="max_num_seqs"):
        parse_overrides(["max_num_seqs=zero"])
    with pytest.raises(ValueError, match=r"staleness_s \(5\) must be at least scrape_interval_s \(30\)"):
        parse_overrides(["scrape_interval_s=30", "staleness_s=5"])
