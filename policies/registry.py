"""Policies by ``policy.type``: the built-in three, plus any installed under the entry point group
``vllm_autoscaler.policies`` (``name = "package.module:PolicyClass"``, a class with ``type``, ``Params``,
``__init__(params, ctx)``, ``state`` and ``recommend(observation)``; the optional members are ``PolicyBase``'s,
whose defaults a plug-in that does not subclass it is given as it loads)."""

from __future__ import annotations

import json
from functools import cache, lru_cache
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel

from policies.base import Policy, PolicyBase, WorkloadContext
from policies.pid import PIDPolicy
from policies.predictive import PredictivePolicy
from policies.threshold import ThresholdPolicy

ENTRY_POINT_GROUP = "vllm_autoscaler.policies"
BUILTIN: dict[str, Any] = {cls.type: cls for cls in (ThresholdPolicy, PIDPolicy, PredictivePolicy)}


@cache
def _load() -> tuple[dict[str, Any], dict[str, str]]:
    """Every policy class by type name, and each plug-in that failed to load with its error. Each plug-in is
    loaded on its own: one broken entry point costs only its own type, never the built-ins or the others."""
    found: dict[str, Any] = dict(BUILTIN)
    broken: dict[str, str] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in found or entry.name in broken:  # a plug-in cannot shadow a built-in
            continue
        try:
            found[entry.name] = with_defaults(entry.load())
        except Exception as exc:  # whatever its import raises
            broken[entry.name] = f"{entry.value}: {type(exc).__name__}: {exc}"
    return found, broken


def with_defaults(cls: Any) -> Any:
    """A plug-in's class, under ``PolicyBase`` when it does not subclass it: what it leaves out takes the base's
    default, so no caller probes a policy for an optional member."""
    if isinstance(cls, type) and not issubclass(cls, PolicyBase):
        return type(cls.__name__, (cls, PolicyBase), {"__module__": cls.__module__, "__doc__": cls.__doc__})
    return cls


def available() -> dict[str, Any]:
    return _load()[0]


def broken_plugins() -> dict[str, str]:
    """Plug-ins that could not be loaded, by type name: said once by the command line and the daemon."""
    return _load()[1]


def policy_class(policy_type: str) -> Any:
    classes, broken = _load()
    if policy_type in broken:
        raise KeyError(f"policy type {policy_type!r}: its plug-in failed to load ({broken[policy_type]})")
    if policy_type not in classes:
        raise KeyError(f"unknown policy type {policy_type!r}; known: {', '.join(sorted(classes))}")
    return classes[policy_type]


def parse_params(raw: dict[str, Any]) -> BaseModel:
    """Validate a ``policy`` block against its type's ``Params`` model (``pydantic.ValidationError``). Blocks alike
    share one model, read and never written: a fleet's workloads mostly carry one block (3.5 MB of copies at
    10,000)."""
    cls = policy_class(str(raw.get("type", "threshold")))
    try:
        text = json.dumps(raw, sort_keys=True)
    except (TypeError, ValueError):  # not JSON's types: validated on its own
        validated: BaseModel = cls.Params.model_validate({**raw, "type": cls.type})
        return validated
    return _params(cls, text)


@lru_cache(maxsize=1024)
def _params(cls: Any, text: str) -> BaseModel:
    params: BaseModel = cls.Params.model_validate({**json.loads(text), "type": cls.type})
    return params


def build(params: BaseModel, ctx: WorkloadContext, state: Any = None) -> Policy:
    """A policy instance; ``state`` from an earlier instance of the same type is carried over."""
    cls = policy_class(str(params.model_dump()["type"]))
    policy: Policy = cls(params, ctx)
    if state is not None:
        policy.state = state
    return policy
