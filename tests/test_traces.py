"""Reading traces (``simulations.traces``): formats, bad input named by line, windows, the busiest window."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from simulations.traces import Trace, TraceError, load_trace


def test_real_traces_are_read(shared_trace: Path) -> None:
    azure = load_trace(shared_trace / "azure_llm_2023_conv.csv")
    assert azure.requests == 19366 and 3400 < azure.duration_s < 3600
    mooncake = load_trace(shared_trace / "mooncake_synthetic.jsonl")
    assert mooncake.requests == 3993 and mooncake.prompt_tokens.max() > 10_000
    rate = load_trace(shared_trace / "servegen_m-mid_rate_600s.csv", rate_scale=0.001, seed=2)
    assert rate.requests > 1000
    assert (
        load_trace(shared_trace / "servegen_m-mid_rate_600s.csv", rate_scale=0.001, seed=2).arrival_s.tolist()
        == rate.arrival_s.tolist()
    )
    # ServeGen's rates are a whole service's: the error gives their mean and the scale that fits.
    with pytest.raises(TraceError, match=r"1,790 requests/s on average\); --rate-scale .* \(0\.0092 or less fits\)"):
        load_trace(shared_trace / "servegen_m-mid_rate_600s.csv")
    with pytest.raises(TraceError, match=r"895 requests/s on average at --rate-scale 0\.5\); .* \(0\.0092 or less"):
        load_trace(shared_trace / "servegen_m-mid_rate_600s.csv", rate_scale=0.5)


def test_request_csvs_name_the_missing_column_and_the_bad_line(tmp_path: Path) -> None:
    burst = tmp_path / "burst.csv"
    burst.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,m,100,20,120,x\n1,m,50,10,60,x\n"
    )
    trace = load_trace(burst)
    assert trace.arrival_s.tolist() == [0.0, 4.0] and trace.prompt_tokens.tolist() == [50, 100]
    no_output = tmp_path / "azure.csv"
    no_output.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n")
    with pytest.raises(TraceError, match=r"azure.csv:1: missing column\(s\) GeneratedTokens"):
        load_trace(no_output, "azure")
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,x,1\n")
    with pytest.raises(TraceError, match=r"bad.csv:3: "):
        load_trace(bad, "azure")
    negative = tmp_path / "negative.jsonl"
    negative.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 9, "input_length": -3, '
        '"output_length": 5}\n'
    )
    with pytest.raises(TraceError, match=r"negative.jsonl:2: .*prompt length -3.0 is not a token count"):
        load_trace(negative)
    huge = tmp_path / "huge.csv"  # beyond int64 it would have been an OverflowError with a traceback
    huge.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,m,10,1e30,0,x\n")
    with pytest.raises(TraceError, match=r"huge.csv:2: output length 1e\+30 is not a token count"):
        load_trace(huge)
    rates = tmp_path / "rates.csv"
    rates.write_text("window_start_s,rate\n0,1.5\n600,nan\n")
    with pytest.raises(TraceError, match=r"rates.csv:3: "):
        load_trace(rates, "rate")


def test_azure_stamps_with_a_zone_read_and_stamps_without_one_are_utc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 2024 files carry a zone; the 2023 ones none, which must not mean the machine's local time: in
    New York the clocks went back an hour at 06:00 UTC on 2023-11-05, which would fold these requests."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        zoned = tmp_path / "zoned.csv"
        zoned.write_text(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2024-05-10 00:00:00.009930+00:00,10,1\n2024-05-10 02:00:00.509930+02:00,10,1\n"
        )
        assert load_trace(zoned).arrival_s.tolist() == pytest.approx([0.0, 0.5])
        naive = tmp_path / "naive.csv"
        naive.write_text(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-05 05:30:00.0000000,10,1\n2023-11-05 06:30:00.0000000,10,1\n"
        )
        assert load_trace(naive).arrival_s.tolist() == [0.0, 3600.0]
    finally:
        monkeypatch.undo()
        time.tzset()


# arrivals (s), prompt tokens, window (s), busiest / mean
BUSIEST_CASES = [
    # 600 tokens over 100 s, 6 a second on average: 300 of them within one second is 50 times that.
    ([0.0, 50.0, 50.5, 100.0], [100, 200, 100, 200], 1.0, 300 / 6),
    # A window reaching the next arrival's very time leaves it out, as [t, t + w) does.
    ([0.0, 50.0, 51.0, 100.0], [100, 200, 100, 200], 1.0, 200 / 6),
    # Windows start anywhere, not on a clock's minutes: 59.5 to 119.5 s holds both of the middle two.
    ([0.0, 59.5, 119.0, 240.0], [10, 30, 30, 10], 60.0, 60 / (80 / 240 * 60)),
    # As long as the trace: the window from the second arrival holds the last two, from the first not the last.
    ([0.0, 10.0, 20.0], [5, 5, 10], 20.0, 15 / 20),
    # Longer than the trace: no such window.
    ([0.0, 10.0, 20.0], [5, 5, 10], 21.0, None),
    # Every request at once: no span to take a mean over.
    ([3.0, 3.0], [5, 5], 1.0, None),
]


@pytest.mark.parametrize(("arrivals", "prompts", "window", "expected"), BUSIEST_CASES)
def test_the_busiest_window_of_a_trace(
    arrivals: list[float], prompts: list[int], window: float, expected: float | None
) -> None:
    trace = Trace("t", np.array(arrivals), np.array(prompts), np.ones(len(prompts), dtype=np.int64))
    got = trace.busiest(window)
    assert got == (None if expected is None else pytest.approx(expected))


def test_a_window_of_a_trace_is_timed_from_its_first_request() -> None:
    trace = Trace("t.csv", np.array([5.0, 65.0, 3605.0, 7205.0, 9000.0]), np.arange(5), np.ones(5, dtype=np.int64))
    part = trace.window(60, 7200)  # from the trace's first request: 65 s to 7205 s, the end left out
    assert part.arrival_s.tolist() == [0.0, 3540.0] and part.prompt_tokens.tolist() == [1, 2]
    assert part.name == "t.csv [1m:2h]"
    assert trace.window(7200).arrival_s.tolist() == [0.0, 1795.0] and trace.window(7200).name == "t.csv [2h:]"
    assert trace.window(0, 60).name == "t.csv [:1m]"
    with pytest.raises(TraceError, match="no request arrives within the --window"):
        trace.window(3601, 7199)


def test_a_trace_saved_with_a_byte_order_mark_and_crlf_reads(tmp_path: Path) -> None:
    azure = tmp_path / "excel.csv"
    azure.write_bytes(
        "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
        "2023-11-16 18:15:46.6805900,374,44\r\n2023-11-16 18:15:50.6805900,10,4\r\n".encode()
    )
    assert load_trace(azure).arrival_s.tolist() == pytest.approx([0.0, 4.0])
    mooncake = tmp_path / "bom.jsonl"
    mooncake.write_bytes('\ufeff{"timestamp": 0, "input_length": 5, "output_length": 1}\n'.encode())
    assert load_trace(mooncake).prompt_tokens.tolist() == [5]
