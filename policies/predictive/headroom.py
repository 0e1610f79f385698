"""The headroom over the demand when none is configured: 0.6 at the default horizon, with the square root of the
horizon (``PredictivePolicy.headroom`` says why)."""

from __future__ import annotations

import math

DEFAULT_HEADROOM = 0.6
REFERENCE_HORIZON_S = 315.0  # the default cold start (300 s) and interval (15 s)
LEARNED_SHARE = 0.8  # of the 90th-percentile rise less one: the headroom --tune found was about 0.7 of it
SHORTEST_HORIZON_S = 150.0  # below it, the one-minute signals' own noise, not the drift, sets the headroom


def default_headroom(horizon: float) -> float:
    """The headroom when none is configured, for a horizon of ``horizon`` seconds
    (``PredictivePolicy.headroom`` says why)."""
    return DEFAULT_HEADROOM * math.sqrt(max(horizon, SHORTEST_HORIZON_S) / REFERENCE_HORIZON_S)
