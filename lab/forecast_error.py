"""Whether a seasonal forecast beats the present: ``python -m lab.forecast_error`` (from the repository root).

Issue 36 asks for a seasonal term, the demand at the same time yesterday scaled to today's level. It earns its
place only if it foresees what the present does not. This measures it on a rate-per-window file (by default
the ServeGen file's 14 days): for each window, three forecasts of the next window's rate,

* ``present``: this window's rate (what ``predictive`` sizes on, less its trend);
* ``seasonal``: the rate one lag (a day, or a week) before the next window, times the rate of the last
  ``level`` windows over the same windows one lag before;
* ``larger``: the larger of the two, so a recurring step is held ahead of time and a new one still seen;

and the headroom each needs to cover the next window in 95 % and 99 % of windows (the quantile of the actual
rate over the forecast), with the capacity that headroom holds over the whole file, as a multiple of the load
(``provision``): what a fleet sized by that forecast pays. Windows whose forecasts read a window of no requests
(a gap in the recording, ``lab.matrix.servegen_whole_days``), or one under ``GAP`` of the file's median
rate (the few clients left while the rest were not recorded), are left out.

A second table asks whether the headroom, not the forecast, can follow the time of day: the present times the
90th percentile of the window-to-window rises the same hours (this window's, ``SHAPE_HOURS`` either side) of the
last days held (``shaped``), scaled as each forecast is to cover the next window, against the present alone over
the same windows. The last row reads every window of the last day: a headroom that follows the recent spread of
the rises, not the hour.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulations.results import write_dated

SERVEGEN = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "servegen_m-mid_rate_600s.csv"
QUANTILES = (0.95, 0.99)
FORECASTS = ("present", "seasonal", "larger")
GAP = 0.05  # of the median rate: ServeGen's gaps record 9 to 15 requests/s of a load of about 1,800


@dataclass(frozen=True)
class Cover:
    """What one forecast needs to cover the next window at one quantile."""

    headroom: float  # the multiplier on the forecast, less one
    provision: float  # the capacity it holds over the file, as a multiple of the load


def forecasts(rates: np.ndarray, lag: int, level: int) -> dict[str, np.ndarray] | None:
    """The next window's rate and each forecast of it, for every window ``t`` whose forecasts read no gap;
    ``None`` where the file is too short for one."""
    least = GAP * float(np.median(rates))
    rows: list[tuple[float, float, float]] = []
    for t in range(lag + level, len(rates) - 1):
        now, before = rates[t - level : t + 2], rates[t - lag - level : t - lag + 2]
        if (now < least).any() or (before < least).any():
            continue
        scale = now[:level].sum() / before[:level].sum()
        rows.append((rates[t + 1], rates[t], rates[t - lag + 1] * scale))
    if not rows:
        return None
    actual, present, seasonal = (np.asarray(column) for column in zip(*rows, strict=True))
    return {"actual": actual, "present": present, "seasonal": seasonal, "larger": np.maximum(present, seasonal)}


SHAPE_HOURS = 1.0  # the same hours as the next window: its own and an hour either side
SHAPE_QUANTILE = 0.9  # of those hours' rises, the shape the headroom follows
SHAPES = ((1, SHAPE_HOURS), (3, SHAPE_HOURS), (7, SHAPE_HOURS), (1, 12.0))  # days read back, hours either side


def shaped(rates: np.ndarray, width: float, days: int, hours: float) -> dict[str, np.ndarray] | None:
    """For every window ``t`` with ``days`` days before it: the next window's rate, the present (this window's), and
    the present times ``SHAPE_QUANTILE`` of the rises from a window to the next over the same hours (``hours`` either
    side of ``t``) of each of the last ``days`` days; windows that are or read a gap are left out, ``None`` where
    none is left."""
    least = GAP * float(np.median(rates))
    day, spread = round(86_400.0 / width), round(hours * 3600.0 / width)
    with np.errstate(divide="ignore", invalid="ignore"):
        rises = np.where((rates[:-1] >= least) & (rates[1:] >= least), rates[1:] / rates[:-1], np.nan)
    rows: list[tuple[float, float, float]] = []
    for t in range(days * day + spread, len(rates) - 1):
        if rates[t] < least or rates[t + 1] < least:
            continue
        past = np.concatenate(
            [rises[t - d * day - spread : min(t - d * day + spread + 1, t)] for d in range(1, days + 1)]
        )
        if np.isnan(past).all():
            continue
        rows.append((rates[t + 1], rates[t], rates[t] * float(np.nanquantile(past, SHAPE_QUANTILE))))
    if not rows:
        return None
    actual, present, shape = (np.asarray(column) for column in zip(*rows, strict=True))
    return {"actual": actual, "present": present, "shaped": shape}


def measure_shapes(rates: np.ndarray, width: float) -> list[str]:
    """The second table: a row per history read and quantile, the present and the shaped headroom over the same
    windows."""
    lines = ["| hours read | covered | windows | present | shaped |", "|---|---|---|---|---|"]
    for days, hours in SHAPES:
        found = shaped(rates, width, days, hours)
        if found is None:
            continue
        what = "the whole last day" if hours >= 12 else f"the same hours of the last {days} day{'s' * (days > 1)}"
        for quantile in QUANTILES:
            shown = shown_cells([cover(found["actual"], found[name], quantile) for name in ("present", "shaped")])
            lines.append(f"| {what} | {quantile:.0%} | {len(found['actual'])} | " + " | ".join(shown) + " |")
    return lines


def cover(actual: np.ndarray, forecast: np.ndarray, quantile: float) -> Cover:
    """The headroom over ``forecast`` that covers ``actual`` in ``quantile`` of windows, and what it holds."""
    multiplier = float(np.quantile(actual / forecast, quantile))
    return Cover(multiplier - 1, multiplier * float(forecast.sum()) / float(actual.sum()))


def shown_cells(cells: list[Cover]) -> list[str]:
    """A row's cells as the tables show them: headroom / provision, the cheapest in bold."""
    best = min(c.provision for c in cells)
    bold = ["**" if c.provision == best else "" for c in cells]
    return [f"{b}{c.headroom:.3f} / {c.provision:.3f}{b}" for b, c in zip(bold, cells, strict=True)]


def read_rates(path: Path) -> tuple[np.ndarray, float]:
    """The rates of a ``window_start_s,rate`` CSV and its window's width in seconds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an empty file is said below, as one line
        table = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(0, 1), ndmin=2)
    if len(table) < 2:
        raise ValueError("needs two windows or more")
    width = float(np.median(np.diff(table[:, 0])))
    if not width > 0:
        raise ValueError("its window starts must rise")
    return table[:, 1], width


def measure(rates: np.ndarray, width: float, levels: tuple[float, ...]) -> list[str]:
    """The report's table: a row per lag, level window and quantile; a cell per forecast."""
    lines = [
        "| lag | level over | covered | windows | " + " | ".join(FORECASTS) + " |",
        "|---" * (4 + len(FORECASTS)) + "|",
    ]
    for lag_name, lag_seconds in (("a day", 86_400.0), ("a week", 7 * 86_400.0)):
        for level_seconds in levels:
            found = forecasts(rates, round(lag_seconds / width), max(1, round(level_seconds / width)))
            if found is None:
                continue
            for quantile in QUANTILES:
                shown = shown_cells([cover(found["actual"], found[name], quantile) for name in FORECASTS])
                lines.append(
                    f"| {lag_name} | {level_seconds / 3600:g} h | {quantile:.0%} | {len(found['actual'])} | "
                    + " | ".join(shown)
                    + " |"
                )
    return lines


def _hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):  # inf hours is no window to read a level over
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of hours above 0")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.forecast_error", description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=SERVEGEN, help="a rate-per-window CSV (default: ServeGen's)")
    parser.add_argument(
        "--level-hours", type=_hours, nargs="+", default=[0.5, 1.0, 3.0], help="the windows today's level is read over"
    )
    parser.add_argument("--report", type=Path, metavar="DIR", help="also write a dated Markdown report there")
    args = parser.parse_args(argv)
    try:
        rates, width = read_rates(args.trace)
    except (OSError, ValueError) as exc:
        print(f"error: {args.trace}: {exc}", file=sys.stderr)
        return 2
    lines = measure(rates, width, tuple(3600 * h for h in args.level_hours))
    shapes = measure_shapes(rates, width)
    print("\n".join([*lines, "", *shapes]))
    if args.report:
        body = [
            f"Trace: `{args.trace.name}`, {len(rates)} windows of {width:g} s. Each cell: the headroom the forecast "
            "needs to cover the next window's rate in that share of windows, then the capacity that headroom "
            "holds over the trace as a multiple of its load (the cheapest in bold). `present` is this window's "
            "rate, `seasonal` the rate one lag before the next window scaled by the level, `larger` the larger "
            "of the two (the module's docstring says how).",
            "",
            *lines,
            "",
            "A headroom that follows the time of day: `shaped` is the present times the 90th percentile of the "
            "window-to-window rises over the same hours (this window's and an hour either side) of the last days, "
            "or over the whole last day; each cell as above, the present alone over the same windows beside it.",
            "",
            *shapes,
        ]
        given = sys.argv[1:] if argv is None else argv
        command = " ".join(["python -m lab.forecast_error", *given])
        written = write_dated(args.report, "forecast-error", "Seasonal forecasts and headrooms", command, body)
        print(f"wrote {written}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
