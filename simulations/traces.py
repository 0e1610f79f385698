"""Request traces: readers for the common public formats and a seeded synthetic day.

Every reader returns a :class:`Trace`: arrival times in seconds from the first request, prompt and output
lengths in tokens, as numpy arrays sorted by arrival.
"""

from __future__ import annotations

import csv
import json
import math
from array import array
from collections.abc import Callable, Container
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

import numpy as np

FORMATS = ("azure", "mooncake", "burstgpt", "rate", "synthetic")
MOONCAKE_BLOCK_TOKENS = 512  # the prompt tokens each of a Mooncake request's ``hash_ids`` stands for
PASS_STRIDE = 1 << 40  # ``PrefixBlocks.repeated``: block ids are far below it (Mooncake's count from 0)
MAX_EXPANDED_REQUESTS = 20_000_000

# Lengths for traces that carry none (rate-per-window files): log-normal fits to the Azure LLM inference
# trace 2023 (conversation): prompt median 1,020 and mean 1,155 tokens, output median 129 and mean 211.
PROMPT_LOGNORMAL = (math.log(1020.0), 0.50)
OUTPUT_LOGNORMAL = (math.log(129.0), 0.99)
MAX_TOKENS = 32_768


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and line."""


class TooManyArrivals(TraceError):
    """Rates that would expand to more than ``MAX_EXPANDED_REQUESTS`` requests (about ``expected``)."""

    def __init__(self, expected: float) -> None:
        super().__init__(f"the rates expand to about {expected:,.0f} requests, more than {MAX_EXPANDED_REQUESTS:,}")
        self.expected = expected


def held_prefix(cache: Container[int], keys: list[int]) -> int:
    """How many of a prompt's first blocks (``keys``, in order, ``PrefixBlocks.keys``) ``cache`` holds."""
    hit = 0
    while hit < len(keys) and keys[hit] in cache:
        hit += 1
    return hit


def _offsets(counts: np.ndarray) -> np.ndarray:
    """Where each request's blocks start in the flat array, and one past the last."""
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


@dataclass(frozen=True)
class PrefixBlocks:
    """The prompts' prefix blocks, as Mooncake records them: request ``i``'s prompt is the blocks
    ``ids[offsets[i]:offsets[i + 1]]`` in order, each ``block_tokens`` tokens (the last may be partial);
    two requests with the same first ``k`` ids share their first ``k`` blocks of prompt, which a replica
    with prefix caching need not prefill again. Flat arrays: 8 bytes a block."""

    offsets: np.ndarray  # int64, one more than there are requests
    ids: np.ndarray  # int64
    block_tokens: int

    def take(self, index: np.ndarray) -> PrefixBlocks:
        """The blocks of the requests ``index``, in that order."""
        counts = np.diff(self.offsets)[index]
        offsets = _offsets(counts)
        starts = self.offsets[:-1][index]
        within = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], counts)
        return PrefixBlocks(offsets, self.ids[np.repeat(starts, counts) + within], self.block_tokens)

    def of(self, request: int) -> np.ndarray:
        """Request ``request``'s block ids, in prompt order."""
        blocks: np.ndarray = self.ids[self.offsets[request] : self.offsets[request + 1]]
        return blocks

    def part(self, start: int, stop: int) -> PrefixBlocks:
        """The blocks of requests ``start`` to ``stop - 1``: a slice of the ids, where ``take`` gathers them."""
        offsets = self.offsets[start : stop + 1]
        return PrefixBlocks(offsets - offsets[0], self.ids[offsets[0] : offsets[-1]], self.block_tokens)

    def head(self, count: int) -> PrefixBlocks:
        """The blocks of the first ``count`` requests."""
        return self.part(0, count)

    def repeated(self, count: int) -> PrefixBlocks:
        """The blocks of ``count`` requests that go through these in order, again and again, each pass
        with blocks of its own: a pass shares prefixes within itself as the trace does, not with the
        passes before it (which would hold every one of its prompts)."""
        requests = len(self.offsets) - 1
        picked = self.take(np.arange(count, dtype=np.int64) % requests)
        passes = np.repeat(np.arange(count, dtype=np.int64) // requests, np.diff(picked.offsets))
        with np.errstate(over="ignore"):
            ids = picked.ids + passes * np.int64(PASS_STRIDE)  # wraps around int64: still one id per block
        return PrefixBlocks(picked.offsets, ids, self.block_tokens)

    def keys(self, request: int) -> list[int]:
        """One key per block of request ``request``'s prompt, naming the block with everything before it
        (vLLM's block hashes chain the same way): equal keys mean equal prefixes."""
        keys, key = [], 0
        for block in self.of(request).tolist():
            key = hash((key, block))
            keys.append(key)
        return keys

    def least_prefill(self, prompt: np.ndarray) -> np.ndarray:
        """The prompt tokens each request must prefill at the least: those after the longest prefix of
        its blocks that an earlier request had, as if one cache of unbounded size served them all (at
        least one token: the last is always computed, for its logits)."""
        seen: set[int] = set()
        cached = np.zeros(len(prompt))
        for i in range(len(prompt)):
            keys = self.keys(i)
            hit = held_prefix(seen, keys)
            seen.update(keys[hit:])
            cached[i] = hit * self.block_tokens
        computed: np.ndarray = np.minimum(np.clip(prompt - cached, 1.0, None), prompt)
        return computed


@dataclass(frozen=True)
class Trace:
    name: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    # Lengths drawn from the built-in distribution (``sample_lengths``), the one the built-in targets are
    # sized for, rather than a recorded trace's own.
    builtin_lengths: bool = False
    # The prompts' prefix blocks, where the trace records them (Mooncake's ``hash_ids``).
    prefix: PrefixBlocks | None = None

    def __post_init__(self) -> None:
        if len(self.arrival_s) == 0:
            raise TraceError(f"{self.name}: the trace has no requests")

    @property
    def requests(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0])

    @property
    def minutes(self) -> np.ndarray:
        """Each request's minute from the trace's first arrival: how every count by minute bins the trace (the plan's
        work, a run's misses, its stretches with almost no request)."""
        minute: np.ndarray = ((self.arrival_s - self.arrival_s[0]) // 60).astype(np.int64)
        return minute

    @cached_property
    def least_prefill_tokens(self) -> np.ndarray:
        """Each request's prompt tokens that no prefix cache can spare it (``PrefixBlocks.least_prefill``);
        all of them without prefix blocks. Worked out once: the oracle and the report both need it."""
        prompt = self.prompt_tokens.astype(float)
        return self.prefix.least_prefill(prompt) if self.prefix is not None else prompt

    @cached_property
    def prompt_length_sigma(self) -> float:
        """The spread of the prompts' lengths, the standard deviation of their natural logarithm: what
        ``errorBudget.promptLengthSigma`` tells the policy of a workload (``policies.predictive.budget``)."""
        return float(np.std(np.log(np.maximum(self.prompt_tokens.astype(float), 1.0))))

    def busiest(self, window_s: float) -> float | None:
        """The prompt tokens arriving in the busiest ``window_s`` of the trace (any start, not aligned to a
        clock), as a multiple of what the trace's mean rate brings in that long; ``None`` for a window
        longer than the trace. Where it is high at a second and low at five minutes, the load comes in
        bursts shorter than a scrape, which no one-minute signal shows before their requests have waited."""
        if not 0 < window_s <= self.duration_s:
            return None
        tokens = np.concatenate(([0.0], np.cumsum(self.prompt_tokens, dtype=np.float64)))
        ends = np.searchsorted(self.arrival_s, self.arrival_s + window_s, side="left")
        most = float(np.max(tokens[ends] - tokens[:-1]))
        return most / (float(tokens[-1]) / self.duration_s * window_s)

    def window(self, start_s: float, end_s: float | None = None) -> Trace:
        """The requests that arrive from ``start_s`` until before ``end_s`` seconds (``None``: the end) after
        the trace's first, timed from the first of them, as every reader times a trace. A week cut from
        months of traffic keeps its load's pace against the cold start, which ``scaled`` does not."""
        first = float(self.arrival_s[0])
        lo = int(np.searchsorted(self.arrival_s, first + start_s, side="left"))
        hi = len(self.arrival_s) if end_s is None else int(np.searchsorted(self.arrival_s, first + end_s, side="left"))
        if hi <= lo:
            raise TraceError(f"{self.name}: no request arrives within the --window")
        arrival = self.arrival_s[lo:hi]
        return replace(
            self,
            name=f"{self.name} [{_span(start_s) if start_s else ''}:{'' if end_s is None else _span(end_s)}]",
            arrival_s=arrival - arrival[0],
            prompt_tokens=self.prompt_tokens[lo:hi],
            output_tokens=self.output_tokens[lo:hi],
            prefix=None if self.prefix is None else self.prefix.part(lo, hi),
        )

    def scaled(self, time_scale: float) -> Trace:
        """``time_scale`` 2 replays the trace twice as fast."""
        if time_scale <= 0:
            raise TraceError("--time-scale must be positive")
        return replace(self, arrival_s=self.arrival_s / time_scale)


def _span(seconds: float) -> str:
    """``seconds`` in the largest whole unit of a duration (``7d``, ``36h``, ``90m``, ``45s``)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size:g}{unit}"
    return f"{seconds:g}s"


class _Requests:
    """A trace's requests as they are read, in typed arrays: 24 bytes a request, where lists of Python
    numbers took about 100 (a week of Azure 2024 traffic is tens of millions of requests)."""

    def __init__(self) -> None:
        self.arrivals, self.prompts, self.outputs = array("d"), array("q"), array("q")
        self.block_counts, self.block_ids = array("q"), array("q")

    def add(self, arrival: float, prompt: float, output: float, blocks: object = None) -> None:
        """One request's fields, checked: a finite arrival, whole token counts that are not negative. A
        request with no output (a failed one in BurstGPT) is kept: it still costs its prefill and first
        token."""
        if not math.isfinite(arrival):
            raise ValueError(f"arrival time {arrival} is not a number")
        for what, value in (("prompt", prompt), ("output", output)):
            if not math.isfinite(value) or not 0 <= value < 2**62:
                raise ValueError(f"{what} length {value} is not a token count")
        if blocks is not None:
            if not isinstance(blocks, list) or not all(type(b) is int and -(2**63) <= b < 2**63 for b in blocks):
                raise ValueError("hash_ids is not a list of integers")
            self.block_ids.extend(blocks)
        self.block_counts.append(len(blocks or ()))
        self.arrivals.append(arrival)
        self.prompts.append(int(prompt))
        self.outputs.append(int(output))

    def trace(self, name: str, block_tokens: int = 0) -> Trace:
        arrival = np.frombuffer(self.arrivals, dtype=np.float64)
        order = np.argsort(arrival, kind="stable")
        arrival = arrival[order] - arrival[order][0] if len(arrival) else arrival.copy()
        prompt = np.clip(np.frombuffer(self.prompts, dtype=np.int64)[order], 1, None)
        output = np.clip(np.frombuffer(self.outputs, dtype=np.int64)[order], 1, None)
        prefix = None
        if len(self.block_ids):
            counts = np.frombuffer(self.block_counts, dtype=np.int64)
            as_read = PrefixBlocks(_offsets(counts), np.frombuffer(self.block_ids, dtype=np.int64).copy(), block_tokens)
            prefix = as_read.take(order)
        return Trace(name, arrival, prompt, output, prefix=prefix)


def _parse_time(text: str) -> float:
    """Seconds since the epoch: a number as it stands, or an ISO timestamp. One without a zone (the Azure
    2023 files) is UTC, not the machine's local time, so that a daylight-saving change inside a trace
    cannot open a gap of an hour or fold one onto itself."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    # Azure traces carry 7 fractional digits, more than datetime accepts.
    if "." in text:
        head, frac = text.rsplit(".", 1)
        digits = frac[: len(frac) - len(frac.lstrip("0123456789"))]
        tail = frac[len(digits) :]
        text = f"{head}.{digits[:6]}{tail}"
    stamp = datetime.fromisoformat(text)
    return (stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)).timestamp()


def _read_request_csv(path: Path, columns: tuple[str, str, str], parse_time: Callable[[str], float]) -> Trace:
    """A CSV with one request per row: its arrival, prompt tokens and output tokens in ``columns``."""
    time_column, prompt_column, output_column = columns
    requests = _Requests()
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in columns if c not in header]
        if missing:
            found = ", ".join(header)
            found = found if len(found) <= 120 else found[:117] + "..."
            raise TraceError(f"{path}:1: missing column(s) {', '.join(missing)}; found {found}")
        reader.fieldnames = header
        for row in reader:
            try:
                requests.add(parse_time(row[time_column]), float(row[prompt_column]), float(row[output_column]))
            except (TypeError, ValueError) as exc:
                raise TraceError(f"{path}:{reader.line_num}: {exc}") from None
    return requests.trace(path.name)


def read_azure(path: Path) -> Trace:
    return _read_request_csv(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), _parse_time)


def read_burstgpt(path: Path) -> Trace:
    return _read_request_csv(path, ("Timestamp", "Request tokens", "Response tokens"), float)


def read_mooncake(path: Path) -> Trace:
    requests = _Requests()
    with path.open(encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                requests.add(
                    float(record["timestamp"]) / 1000.0,
                    float(record["input_length"]),
                    float(record["output_length"]),
                    record.get("hash_ids"),
                )
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise TraceError(f"{path}:{number}: not a Mooncake request ({exc!r})") from None
    return requests.trace(path.name, MOONCAKE_BLOCK_TOKENS)


def sample_lengths(rng: np.random.Generator, count: int, source: Trace | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths: pairs drawn from ``source``, or the documented log-normal fits."""
    if source is not None:
        picks = rng.integers(0, source.requests, size=count)
        return source.prompt_tokens[picks], source.output_tokens[picks]
    prompt = rng.lognormal(*PROMPT_LOGNORMAL, size=count)
    output = rng.lognormal(*OUTPUT_LOGNORMAL, size=count)
    return (
        np.clip(np.rint(prompt), 1, MAX_TOKENS).astype(np.int64),
        np.clip(np.rint(output), 1, MAX_TOKENS).astype(np.int64),
    )


def poisson_arrivals(rng: np.random.Generator, starts: np.ndarray, rates: np.ndarray, width: float) -> np.ndarray:
    """Arrivals of a piecewise-constant Poisson process: ``rates[i]`` per second from ``starts[i]``."""
    expected = float(np.sum(np.maximum(rates, 0.0)) * width)
    if expected > MAX_EXPANDED_REQUESTS:
        raise TooManyArrivals(expected)
    counts = rng.poisson(np.maximum(rates, 0.0) * width)
    offsets = rng.random(int(counts.sum())) * width
    return np.sort(np.repeat(starts, counts) + offsets)


def read_rate(path: Path, seed: int, rate_scale: float = 1.0, lengths: Trace | None = None) -> Trace:
    """A rate-per-window CSV (first column: window start in seconds, second: requests per second)."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        starts, rates = [], []
        for row in reader:
            if not row:
                continue
            try:
                window_start, rate = float(row[0]), float(row[1])
                if not (math.isfinite(window_start) and math.isfinite(rate)) or rate < 0:
                    raise ValueError(f"window {row[0]!r} at rate {row[1]!r} is not a start and a rate of 0 or more")
            except (IndexError, ValueError) as exc:
                raise TraceError(f"{path}:{reader.line_num}: {exc}") from None
            starts.append(window_start)
            rates.append(rate * rate_scale)
    if header is None or not starts:
        raise TraceError(f"{path}: no windows")
    start = np.asarray(starts)
    width = float(np.median(np.diff(start))) if len(start) > 1 else 60.0
    rng = np.random.default_rng(seed)
    try:
        arrivals = poisson_arrivals(rng, start, np.asarray(rates), width)
    except TooManyArrivals as exc:
        # A file of aggregate rates (ServeGen's are a whole service's, about 2,000 requests/s): say what
        # its mean rate is and which scale fits, so the user need not work out either.
        fits = rate_scale * MAX_EXPANDED_REQUESTS / exc.expected
        unit = 10.0 ** (math.floor(math.log10(fits)) - 1)
        fits = math.floor(fits / unit) * unit  # two digits, rounded down: the scale printed must fit
        raise TraceError(
            f"{path}: {exc} ({exc.expected / (len(start) * width):,.4g} requests/s on average"
            f"{f' at --rate-scale {rate_scale:g}' if rate_scale != 1 else ''}); --rate-scale multiplies every "
            f"rate ({fits:.2g} or less fits); --window takes its part after the whole file is expanded"
        ) from None
    prompt, output = sample_lengths(rng, len(arrivals), lengths)
    arrivals = arrivals - (arrivals[0] if len(arrivals) else 0.0)
    return Trace(path.name, arrivals, prompt, output, builtin_lengths=lengths is None)


def synthetic_day(seed: int = 0, mean_rps: float = 2.0, hours: float = 2.0, bursts: int = 6) -> Trace:
    """A diurnal day with bursts, compressed into ``hours`` (by default twelvefold, into two hours): a
    sinusoidal daily cycle (peak mid-afternoon, trough before dawn, peak to trough 4:1) at ``mean_rps`` on
    average, plus ``bursts`` surges of 3 to 15 minutes at 1.3x to 1.8x the rate of the moment, Poisson
    arrivals in 10 s windows, log-normal lengths (``sample_lengths``). Seeded."""
    rng = np.random.default_rng(seed)
    width = 10.0
    starts = np.arange(0.0, hours * 3600.0, width)
    phase = 2 * math.pi * (starts / (hours * 3600.0) - 15.0 / 24.0)
    rates = mean_rps * (1.0 + 0.6 * np.cos(phase))
    for _ in range(bursts):
        begin = rng.uniform(0, hours * 3600.0)
        length = rng.uniform(180, 900)
        factor = rng.uniform(1.3, 1.8)
        inside = (starts >= begin) & (starts < begin + length)
        rates[inside] *= factor
    arrivals = poisson_arrivals(rng, starts, rates, width)
    prompt, output = sample_lengths(rng, len(arrivals))
    return Trace(f"synthetic-day(seed={seed})", arrivals, prompt, output, builtin_lengths=True)


def synthetic_idle(seed: int = 0, hours: float = 4.0, sessions: int = 2, rps: float = 0.3) -> Trace:
    """A model most of whose day is idle, as per-team fine-tunes and evaluation models are: ``sessions``
    bursts of use of 20 to 40 minutes at about ``rps`` requests/s (0.5x to 1.5x), an hour or more apart, and no
    request at all in between. Poisson arrivals in 10 s windows, log-normal lengths. Seeded."""
    rng = np.random.default_rng(seed)
    width = 10.0
    starts = np.arange(0.0, hours * 3600.0, width)
    rates = np.zeros(len(starts))
    slot = hours * 3600.0 / sessions  # one session in each slot, after at least 40 % of it idle
    for i in range(sessions):
        length = rng.uniform(1200, 2400)
        begin = i * slot + rng.uniform(0.4 * slot, max(0.4 * slot, slot - length))
        inside = (starts >= begin) & (starts < begin + length)
        rates[inside] = rps * rng.uniform(0.5, 1.5)
    arrivals = poisson_arrivals(rng, starts, rates, width)
    arrivals = arrivals - (arrivals[0] if len(arrivals) else 0.0)  # the trace starts at its first request
    prompt, output = sample_lengths(rng, len(arrivals))
    return Trace(f"synthetic-idle(seed={seed})", arrivals, prompt, output, builtin_lengths=True)


def guess_format(path: Path) -> str:
    if path.suffix in (".jsonl", ".json"):
        return "mooncake"
    with path.open(encoding="utf-8-sig") as handle:
        header = handle.readline()
    if "TIMESTAMP" in header and "ContextTokens" in header:
        return "azure"
    if "Request tokens" in header:
        return "burstgpt"
    if "rate" in header.lower():
        return "rate"
    raise TraceError(f"{path}: cannot tell the trace format from its header {header.strip()!r}; use --format")


def load_trace(
    path: str | Path | None,
    fmt: str | None = None,
    seed: int = 0,
    rate_scale: float = 1.0,
    lengths_from: str | Path | None = None,
) -> Trace:
    if path is None:
        if fmt not in (None, "synthetic"):
            raise TraceError(f"--format {fmt} needs --trace FILE")
        return synthetic_day(seed)
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    if not path.is_file():
        raise TraceError(f"{path}: not a file")
    try:
        return _read(path, fmt, seed, rate_scale, lengths_from)
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read it as a text trace ({exc})") from None


def _read(path: Path, fmt: str | None, seed: int, rate_scale: float, lengths_from: str | Path | None) -> Trace:
    fmt = fmt or guess_format(path)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
    if fmt == "azure":
        return read_azure(path)
    if fmt == "mooncake":
        return read_mooncake(path)
    if fmt == "burstgpt":
        return read_burstgpt(path)
    if fmt == "rate":
        lengths = load_trace(lengths_from, seed=seed) if lengths_from else None
        return read_rate(path, seed, rate_scale, lengths)
    return synthetic_day(seed)


def write_azure(trace: Trace, path: str | Path, start: float = 1_764_547_200.0) -> None:
    """Write a trace in the Azure format (what the benchmarks feed to ``simulate --trace``)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for arrival, prompt, output in zip(trace.arrival_s, trace.prompt_tokens, trace.output_tokens, strict=True):
            stamp = datetime.fromtimestamp(start + float(arrival), UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            handle.write(f"{stamp},{int(prompt)},{int(output)}\n")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m simulations.traces", description="Write a seeded synthetic trace in the Azure format."
    )
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--mean-rps", type=float, default=2.0)
    parser.add_argument("--bursts", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    trace = synthetic_day(args.seed, args.mean_rps, args.hours, args.bursts)
    write_azure(trace, args.out)
    print(f"{trace.requests} requests over {trace.duration_s / 3600:.1f} h -> {args.out}")


if __name__ == "__main__":
    main()
