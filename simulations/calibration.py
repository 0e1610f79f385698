"""The simulated replica fitted to a real vLLM: ``vllm bench serve --save-result`` files in, a replica file out.

A result file is replayed on one simulated replica as the benchmark ran it (``simulate_run``): its requests'
lengths, sent at its request rate (all at once for ``inf``) by a client that keeps at most
``max_concurrency`` in flight. ``fit`` sets the four parameters no flag of vLLM's states (the prefill speed,
the weight read of an engine step, the KV-cache read per token and the fixed per-request overhead) from
the files it is given:

1. A starting point from the summaries (``_closed_form``): the prefill speed from the runs' p99 TTFT, and
   the step's weight read and cost per sequence from their median ITL, an engine step that mostly decodes
   ``C`` sequences of prompts of ``I`` and outputs of ``O`` tokens: ``w + C / P + k C (I + O / 2)``.
2. From there, the step's three costs that make the simulated replica closest to the files' throughput and
   median TPOT (squared log ratios, a simplex search): the start misses how prompts queue behind one
   another, which the simulator's own schedule has.
3. A run whose median TTFT is below half what those costs give its prompts was served from a warm prefix
   cache (``vllm bench serve`` first sends one of the benchmark's own prompts as a test; a sweep that sends
   the same seeded prompts run after run hits the cache too): it is named and its TTFT left out. A lone warm
   request's TTFT is the fixed overhead. Then all four from every figure left.

``docs/simulation.md`` says how to measure each parameter; the fidelity report in ``docs/results/`` shows
the fit on published sweeps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from simulations import engine
from simulations.fleet import Fleet
from simulations.replica_model import ReplicaModel, first_problem
from simulations.traces import Trace

STEP_S = 0.02
"""The simulated step of a benchmark replay: about an engine step, so a first token lands within 20 ms."""

STEPS_A_RUN = 50_000
TTFT_STEPS = 100
"""A long run is replayed in coarser steps: ``STEPS_A_RUN`` steps in all, each at most a ``TTFT_STEPS``-th of
the run's median TTFT (a first token waits for the next step or two) and never under ``STEP_S``. A sweep of
hour-long runs at concurrency 1 (16k-token prompts, 7 s to a first token, 5,263 s a run) replays in 70 ms steps,
in under a third of the time; ``tests/test_calibration.py`` holds throughput and median TPOT to 1 % of the 20 ms
replay and median TTFT to 2 %."""


SEND_GAP_S = 0.001
"""``vllm bench serve`` sends the requests it has ready one after another, about a millisecond apart (the second
source's per-request lists in ``lab/sweeps/README.md``: three prompts sent together differ by 0.7 and 2.6 ms). An
idle engine starts a step with the first that reaches it; the others wait for the next."""


METRICS = (
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
)
"""What a row compares, under vLLM's own names."""

LIGHT_CONCURRENCY = 1.5
"""Runs with at most this many requests in flight on average time a lone request's first token."""


class CalibrationError(ValueError):
    """A result file that cannot be read, or runs that cannot be fitted; one line, naming the file or the cause."""


class BenchRun(BaseModel):
    """The summary ``vllm bench serve --save-result`` writes, and its per-request lists where present."""

    model_config = ConfigDict(extra="ignore")

    request_rate: float
    max_concurrency: int | None = Field(ge=1)
    completed: int = Field(ge=1)
    duration: float = Field(gt=0)
    total_input_tokens: int = Field(ge=0)
    total_output_tokens: int = Field(ge=1)
    request_throughput: float = Field(gt=0)
    output_throughput: float = Field(gt=0)
    mean_ttft_ms: float = Field(ge=0)
    median_ttft_ms: float = Field(ge=0)
    p99_ttft_ms: float = Field(ge=0)
    mean_tpot_ms: float = Field(ge=0)
    median_tpot_ms: float = Field(ge=0)
    p99_tpot_ms: float = Field(ge=0)
    mean_itl_ms: float = Field(ge=0)
    median_itl_ms: float = Field(ge=0)
    p99_itl_ms: float = Field(ge=0)
    burstiness: float = Field(default=1.0, gt=0)
    input_lens: list[int] | None = None
    output_lens: list[int] | None = None
    ttfts: list[float] | None = None

    @field_validator("request_rate", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> Any:
        return math.inf if value in ("inf", "Infinity") else value

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Each completed request's prompt and output tokens: the per-request lists, else the means."""
        listed = self.input_lens is not None and self.output_lens is not None
        if listed and len(self.input_lens or ()) == len(self.output_lens or ()):
            prompt, output = np.array(self.input_lens, dtype=float), np.array(self.output_lens, dtype=float)
            served = output > 0  # a failed request has no output
            if served.sum() >= 1:
                return prompt[served], output[served]
        n = self.completed
        return np.full(n, self.total_input_tokens / n), np.full(n, max(self.total_output_tokens / n, 1.0))

    @property
    def load(self) -> int:
        """The requests the run holds at once at most: its concurrency limit, or for a burst without one (or a
        limit above what it sent) the requests it served."""
        return min(self.max_concurrency or self.completed, self.completed)

    @property
    def in_flight(self) -> float:
        """The requests in flight on average (Little's law: throughput times mean latency)."""
        _, output = self.lengths()
        latency = (self.mean_ttft_ms + self.mean_tpot_ms * max(float(output.mean()) - 1.0, 0.0)) / 1e3
        return self.request_throughput * latency


def _read_text(path: str, errors: str = "strict") -> str:
    """A file's text, or ``CalibrationError`` naming it when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8", errors=errors)
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def load_run(path: str) -> BenchRun:
    """A result file, or ``CalibrationError`` naming the file and the first missing or bad field."""
    try:
        data = json.loads(_read_text(path))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CalibrationError(f"{path}: not a JSON result file ({exc})") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: not a vllm bench serve result (a JSON object)")
    try:
        return BenchRun.model_validate(data)
    except ValidationError as exc:
        problem = first_problem(exc, "result")
        raise CalibrationError(f"{path}: {problem} (a vllm bench serve --save-result file)") from None


def kv_tokens_from_log(path: str) -> int:
    """The KV cache's size from a vLLM server log's ``GPU KV cache size: N tokens`` line."""
    import re

    text = _read_text(path, errors="replace")
    found = re.findall(r"GPU KV cache size:\s*([\d,]+)\s*tokens", text)
    if not found:
        raise CalibrationError(f"{path}: no 'GPU KV cache size: N tokens' line (vLLM logs it at start-up)")
    return int(found[-1].replace(",", ""))


@dataclass(frozen=True)
class Summary:
    """A run's figures under vLLM's names (``METRICS``)."""

    figures: dict[str, float]

    @staticmethod
    def measured(run: BenchRun) -> Summary:
        return Summary({name: float(getattr(run, name)) for name in METRICS})


def simulate_run(model: ReplicaModel, run: BenchRun, seed: int = 0) -> Summary:
    """``run`` replayed on one simulated replica: its requests sent at its rate (a gamma process of its
    burstiness, as ``vllm bench serve`` sends them; all at once for ``inf``), at most ``max_concurrency`` in
    flight, each sent as soon as its time and a free slot have come and ``SEND_GAP_S`` after the one before.
    ``vllm bench serve`` first sends the run's first prompt as a test, so with prefix caching on (vLLM V1's
    default) the first request finds its prompt in the cache and computes only its last block."""
    prompt, output = run.lengths()
    n = len(prompt)
    if math.isinf(run.request_rate):
        schedule = np.zeros(n)
    else:
        gaps = np.random.default_rng(seed).gamma(run.burstiness, 1.0 / (run.request_rate * run.burstiness), n)
        schedule = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    limit = run.max_concurrency or n
    arrival = np.full(n, math.inf)
    step_s = max(STEP_S, min(run.duration / STEPS_A_RUN, run.median_ttft_ms / 1e3 / TTFT_STEPS))
    fleet = Fleet(model.model_copy(update={"step_s": step_s}), Trace("bench", arrival, prompt, output), 1)
    if model.prefix_caching:  # the benchmark's test request left its first prompt in the cache: a block is computed
        fleet.cached(0, min(float(prompt[0]), float(model.kv_block_tokens)))
    if engine.replay_bench(fleet.arrays, schedule, limit, SEND_GAP_S, model.request_overhead_s, 1e6) > 1e6:
        raise CalibrationError("the simulated replica did not finish the run within 10^6 s")
    ttft = (fleet.first_token - fleet.arrival) * 1e3
    decoded = output > 1
    tpot = (fleet.finished[decoded] - fleet.first_token[decoded]) / (output[decoded] - 1) * 1e3
    duration = float(np.max(fleet.finished))
    if not len(tpot):
        tpot = np.zeros(1)
    return Summary(
        {
            "request_throughput": n / duration,
            "output_throughput": float(output.sum()) / duration,
            "mean_ttft_ms": float(ttft.mean()),
            "median_ttft_ms": float(np.median(ttft)),
            "p99_ttft_ms": float(np.percentile(ttft, 99)),
            "mean_tpot_ms": float(tpot.mean()),
            "median_tpot_ms": float(np.median(tpot)),
        }
    )


@dataclass(frozen=True)
class Fit:
    model: ReplicaModel
    warnings: list[str]


def _closed_form(runs: list[tuple[str, BenchRun]]) -> tuple[float, float, float, float]:
    """Step 1 of the fit: a start for ``(w, 1 / P, k)`` and the overhead from the summaries alone.

    ``1 / P`` is the slope of the runs' p99 TTFT over the prompt tokens their load holds at once (its concurrency
    limit, or a burst's requests): the last of them waits for all to be prefilled; the intercept is the overhead
    and a step's weight read. The median ITL, an engine step that mostly decodes, gives the rest by least squares
    over the loads ``C``:
    ``w + C (1 / P + k (I + O / 2))``, ``k`` being what the slope leaves beyond ``1 / P``. Example: concurrency 1,
    2, 4 and 8 of 16,384-token prompts (``lab/sweeps/``) give 2,411 tokens a second, and their median ITLs of 34.2
    to 40.1 ms a step of 33.5 ms and 0.84 ms a sequence, 25 ns a token; the overhead 0.23 s.
    """
    loads: list[float] = []
    queued: list[float] = []
    ttfts: list[float] = []
    itls: list[float] = []
    context = 0.0
    for _, run in runs:
        prompt, output = run.lengths()
        loads.append(float(run.load))
        queued.append(run.load * float(prompt.mean()))
        ttfts.append(run.p99_ttft_ms / 1e3)
        itls.append(run.median_itl_ms / 1e3)
        context = max(context, float(prompt.mean()) + float(output.mean()) / 2.0)
    if len(set(loads)) < 2:
        raise CalibrationError(
            "the runs cannot separate an engine step's fixed cost from its cost per sequence: give results at two "
            "or more concurrencies (--max-concurrency 1, 8, 32, ...)"
        )
    inv_p, fixed = (float(x) for x in np.polyfit(queued, ttfts, 1))
    if inv_p <= 0:  # warm runs hide the slope: the coldest run's own speed
        inv_p, fixed = max(t / q for t, q in zip(ttfts, queued, strict=True)), 0.0
    slope, w = (float(x) for x in np.polyfit(loads, itls, 1))
    if w <= 0:
        w = 0.8 * min(itls)
    k = max((slope - inv_p) / max(context, 1.0), 1e-10)
    return w, max(inv_p, 1e-6), k, max(fixed - w, 0.01)


def with_step_costs(base: ReplicaModel, w: float, inv_p: float, k: float, overhead: float) -> ReplicaModel:
    """``base`` with a step's weight read ``w``, prefill ``1 / inv_p`` tokens a second, KV read ``k`` a token and
    ``overhead`` a request: its decode speed alone is ``1 / (w + 1 / P)``."""
    return base.model_copy(
        update={
            "prefill_tokens_per_s": 1.0 / inv_p,
            "decode_tokens_per_s": 1.0 / (w + inv_p),
            "kv_read_s_per_token": k,
            "request_overhead_s": overhead,
        }
    )


def _log_ratios(
    model: ReplicaModel, runs: list[tuple[str, BenchRun]], warm: set[str], ttft: tuple[str, ...]
) -> list[tuple[float, str, str]]:
    """Each fitted figure's log ratio, simulated over measured, with its file and figure: throughput, median
    TPOT and, but for a warm run, the ``ttft`` figures."""
    ratios: list[tuple[float, str, str]] = []
    for name, run in runs:
        simulated = simulate_run(model, run).figures
        for key in ("request_throughput", "median_tpot_ms", *(() if name in warm else ttft)):
            measured, got = float(getattr(run, key)), simulated[key]
            if measured > 0 and got > 0:
                ratios.append((math.log(got / measured), name, key))
    return ratios


def _error(model: ReplicaModel, runs: list[tuple[str, BenchRun]], warm: set[str]) -> float:
    """How far the simulated replica is from ``runs``: the squared log ratios of throughput, median TPOT and
    median and mean TTFT, summed."""
    return sum(ratio**2 for ratio, _, _ in _log_ratios(model, runs, warm, ("median_ttft_ms", "mean_ttft_ms")))


def _worst(model: ReplicaModel, runs: list[tuple[str, BenchRun]], warm: set[str]) -> tuple[float, str, str]:
    """The largest absolute log ratio of throughput, median TPOT and median TTFT, with its file and figure."""
    ratios = [(abs(ratio), name, key) for ratio, name, key in _log_ratios(model, runs, warm, ("median_ttft_ms",))]
    return max(ratios, default=(0.0, "", ""), key=lambda found: found[0])


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float, iterations: int) -> np.ndarray:
    """Minimise ``f`` from ``x0`` (Nelder and Mead's simplex, standard coefficients)."""
    simplex = [x0] + [x0 + step * np.eye(len(x0))[i] for i in range(len(x0))]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                first = simplex[0]
                simplex = [first] + [first + 0.5 * (x - first) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    found: np.ndarray = simplex[int(np.argmin(values))]
    return found


KV_READ_FLOOR = 1e-12
OVERHEAD_FLOOR = 1e-4


def fit(runs: list[tuple[str, BenchRun]], base: ReplicaModel, iterations: int = 60) -> Fit:
    """The replica model that best reproduces ``runs`` (name, run), on ``base``'s flags (KV cache, batch,
    chunk); its warnings name the runs whose TTFT a warm prefix cache served, left out of the TTFT fit.

    First the engine step's costs from throughput and TPOT alone; then the runs whose median TTFT is below
    half what those costs give their prompts are warm (``vllm bench serve``'s test prompt, or a sweep that
    sends the same seeded prompts run after run): a lone warm request's TTFT is the fixed overhead, and the
    others' TTFT is left out; then all four from every figure that is not warm.
    """
    if not runs:
        raise CalibrationError("no result file to fit")
    everyone = {name for name, _ in runs}
    w, inv_p, k, overhead = _closed_form(runs)

    def model_at(x: np.ndarray, fixed_overhead: float | None = None) -> ReplicaModel:
        values = [float(v) for v in np.exp(x)]
        overhead = fixed_overhead if fixed_overhead is not None else values[3]
        return with_step_costs(base, values[0], values[1], values[2], overhead)

    start = np.log([w, inv_p, max(k, 1e-9)])
    steps = _nelder_mead(lambda x: _error(model_at(x, overhead), runs, everyone), start, 0.3, iterations)
    engine = model_at(steps, 0.0)
    warm: set[str] = set()
    warnings: list[str] = []
    lone: list[float] = []
    for name, run in runs:
        least = simulate_run(engine, run).figures["median_ttft_ms"]
        if run.median_ttft_ms < 0.5 * least:
            warm.add(name)
            if run.in_flight <= LIGHT_CONCURRENCY:
                lone.append(run.median_ttft_ms / 1e3)
            warnings.append(
                f"{name}: median TTFT {run.median_ttft_ms:.0f} ms is below half its prompts' compute ({least:.0f} ms): "
                "served from a warm prefix cache (vllm bench serve's test prompt, or prompts repeated from an earlier "
                "run); its TTFT is left out of the fit"
            )
    if lone:
        overhead = float(min(lone))
    if warm == everyone:
        best = np.append(steps, math.log(overhead))
    else:
        best = _nelder_mead(
            lambda x: _error(model_at(x), runs, warm), np.append(steps, math.log(overhead)), 0.2, iterations
        )
    worst = _worst(model_at(best), runs, warm)
    if worst[0] > math.log(2.0):
        raise CalibrationError(
            f"no replica reproduces the runs within a factor of 2 (the closest is {math.exp(worst[0]):.1f} times off "
            f"on {worst[1]}'s {worst[2]}): are they one server, one configuration and the flags given?"
        )
    w, inv_p, k, overhead = (float(v) for v in np.exp(best))
    k = 0.0 if k < 1e-11 else k
    overhead = 0.0 if overhead < OVERHEAD_FLOOR else overhead
    return Fit(with_step_costs(base, w, inv_p, k, overhead), warnings)


def compare_rows(model: ReplicaModel, runs: list[tuple[str, BenchRun]]) -> list[dict[str, Any]]:
    """One row a file: its measured figures beside the simulated replica's on the same run."""
    return [
        {"file": name, "measured": Summary.measured(run).figures, "simulated": simulate_run(model, run).figures}
        for name, run in runs
    ]


REPLICA_FILE_FIELDS = (
    "name",
    "max_num_seqs",
    "kv_cache_tokens",
    "kv_block_tokens",
    "max_num_batched_tokens",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "kv_read_s_per_token",
    "request_overhead_s",
    "gpus_per_replica",
)
"""What a replica file holds: the server's flags and the fitted speeds; the simulation's own settings
(step, scrape, routing, cold start) stay with ``simulate``."""


def replica_file_data(model: ReplicaModel) -> dict[str, Any]:
    data = model.model_dump()
    return {key: data[key] for key in REPLICA_FILE_FIELDS}


def load_replica_file(path: str) -> ReplicaModel:
    """A replica file (``calibrate --out``) as the replica model, or ``CalibrationError`` naming the field."""
    import yaml

    try:
        data = yaml.safe_load(_read_text(path))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CalibrationError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: a replica file is a mapping of fields (calibrate --out writes one)")
    unknown = sorted(set(data) - set(REPLICA_FILE_FIELDS))
    if unknown:
        raise CalibrationError(f"{path}: {unknown[0]}: not a replica field (one of {', '.join(REPLICA_FILE_FIELDS)})")
    try:
        return ReplicaModel.model_validate(data)
    except ValidationError as exc:
        raise CalibrationError(f"{path}: {first_problem(exc, 'replica')}") from None
