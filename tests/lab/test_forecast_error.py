"""The seasonal forecast's and the shaped headroom's measurement (``lab/forecast_error.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lab.forecast_error import cover, forecasts, main, measure, shaped

DAY = 144  # 10-minute windows


def _days(shape: np.ndarray, days: int, noise: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.tile(shape, days) * rng.lognormal(0.0, noise, size=days * len(shape))


def test_cover_is_the_quantile_of_the_actual_over_the_forecast_and_what_it_holds() -> None:
    actual, forecast = np.array([1.0, 2.0, 4.0, 8.0]), np.array([1.0, 1.0, 4.0, 4.0])
    found = cover(actual, forecast, 1.0)
    assert found.headroom == pytest.approx(1.0)  # the worst window is twice its forecast
    assert found.provision == pytest.approx(2.0 * 10.0 / 15.0)


def test_a_day_that_repeats_is_foreseen_by_its_season_and_not_by_the_present() -> None:
    steps = np.where(np.arange(DAY) % 12 < 6, 1.0, 3.0)  # a step up and back every two hours, every day
    found = forecasts(_days(steps, 4, noise=0.01), lag=DAY, level=6)
    assert found is not None
    seasonal, present = cover(found["actual"], found["seasonal"], 0.99), cover(found["actual"], found["present"], 0.99)
    assert seasonal.headroom < 0.1 < 2.0 < present.headroom
    assert seasonal.provision < present.provision


def test_a_load_with_no_season_is_foreseen_better_by_the_present() -> None:
    rng = np.random.default_rng(1)
    walk = 100 * np.exp(np.cumsum(rng.normal(0, 0.05, size=4 * DAY)))  # each day its own path
    found = forecasts(walk, lag=DAY, level=6)
    assert found is not None
    assert (
        cover(found["actual"], found["present"], 0.95).provision
        < cover(found["actual"], found["seasonal"], 0.95).provision
    )


def test_a_gap_in_the_recording_is_left_out() -> None:
    rates = _days(np.ones(DAY), 3, noise=0.01)
    whole = forecasts(rates, lag=DAY, level=6)
    rates[2 * DAY + 50] = 0.01  # a window with a few clients left
    gapped = forecasts(rates, lag=DAY, level=6)
    assert whole is not None and gapped is not None
    assert len(gapped["actual"]) == len(whole["actual"]) - 8  # every window whose forecasts read it
    assert gapped["actual"].max() / gapped["actual"].min() < 1.2


def test_too_short_a_file_has_no_row_for_the_lag_it_cannot_reach() -> None:
    assert forecasts(np.ones(DAY), lag=DAY, level=6) is None
    lines = measure(np.ones(3 * DAY), 600.0, (3600.0,))
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| a day", "| a day"]  # no week in three days


def test_the_command_writes_a_dated_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "rates.csv"
    rates = _days(np.linspace(1, 3, DAY), 3, noise=0.1)
    trace.write_text("window_start_s,rate\n" + "".join(f"{i * 600},{r}\n" for i, r in enumerate(rates)))
    assert main(["--trace", str(trace), "--report", str(tmp_path / "out")]) == 0
    (report,) = (tmp_path / "out").glob("*-forecast-error.md")
    text = report.read_text()
    assert "python -m lab.forecast_error --trace" in text and "Machine:" in text
    assert text.count("| a day |") == 6
    assert text.count("| the same hours of the last 1 day |") == 2 and "| the whole last day |" in text
    capsys.readouterr()
    (tmp_path / "one.csv").write_text("window_start_s,rate\n0,1\n")
    (tmp_path / "words.csv").write_text("window_start_s,rate\nnoon,1\n")
    for name in ("missing.csv", "one.csv", "words.csv"):
        assert main(["--trace", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and name in err and err.count("\n") == 1
    for hours in ("0", "-1", "inf", "nan", "noon"):
        with pytest.raises(SystemExit) as exit_:
            main(["--trace", str(trace), "--level-hours", hours])
        assert exit_.value.code == 2
        assert "expected a finite number of hours above 0" in capsys.readouterr().err


def test_a_headroom_that_follows_the_hours_pays_where_the_rises_keep_their_hour() -> None:
    """Each day rises 10 % a window for two hours at the same time, then falls back: the present needs the rise's
    headroom in every window, the shaped headroom only in those hours."""
    ramp = np.ones(DAY)
    ramp[60:72] = 1.1 ** np.arange(1, 13)
    found = shaped(_days(ramp, 4, noise=0.005), 600.0, 1, 1.0)
    assert found is not None
    present, shape = cover(found["actual"], found["present"], 0.95), cover(found["actual"], found["shaped"], 0.95)
    assert present.headroom > 0.09 and shape.headroom < 0.03
    assert shape.provision < present.provision - 0.05


def test_a_headroom_with_no_day_before_it_or_only_gaps_has_no_row() -> None:
    assert shaped(np.ones(DAY), 600.0, 1, 1.0) is None
    gapped = np.ones(3 * DAY)
    gapped[DAY : 2 * DAY] = 0.0  # a day not recorded: its windows, and the next day's read of it, are left out
    assert shaped(gapped, 600.0, 1, 0.0) is None
