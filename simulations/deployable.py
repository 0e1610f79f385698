"""``simulate --write-config``: the policy that met the SLO, as a policy file ``run`` deploys."""

from __future__ import annotations

from typing import Any

from policies.policy_file import PolicyFile
from simulations.contenders import (
    policy_variant,
    workload_dict,
)
from simulations.runner import RunResult
from simulations.tuning import knob_variant, policy_block


def deployable(document: PolicyFile, result: RunResult, cold_start_s: float) -> dict[str, Any]:
    """The policy file that runs ``result``'s policy on the first workload as the comparison ran it: the
    setting ``tune`` found (``result.tuned``) or the file's own block for the type (its defaults if the
    file sets another type), and the cold start simulated unless the file measures it (``auto``). The
    other workloads stay as they are. Defaults are left out; the file parses back to the same policy."""
    workload = document.workloads[0]
    policy_type = result.policy
    if result.tuned:
        _, variant = knob_variant(document, workload, policy_type, result.tuned)
    else:
        _, variant = policy_variant(document, workload, policy_block(workload, policy_type))
    if variant.cold_start_seconds != "auto":
        variant = variant.model_copy(update={"cold_start_seconds": max(0, round(cold_start_s))})
    written = document.model_copy(update={"workloads": [variant, *document.workloads[1:]]})
    raw = written.model_dump(by_alias=True, exclude_defaults=True, mode="json")
    # Defaults that say what the file is about stay: the tick, the target's kind, the metrics' target
    # types, and the policy block even where it is the default one (threshold).
    full = workload_dict(variant)
    raw = {"interval": written.interval, **raw}
    signals = {"capacity": full["capacity"]} if "metrics" not in full else {"metrics": full["metrics"]}
    raw["workloads"][0].update(
        target=full["target"], coldStartSeconds=full["coldStartSeconds"], **signals, policy=dict(variant.policy)
    )
    return raw
