"""The policy file (docs/contract.md): strict models, loading, validation with field paths, and deciders.

A file is YAML or JSON. Every problem is reported with its field path, all at once, so that a user can
fix a file in one pass; ``load_policy_file`` raises :class:`PolicyFileError` holding them.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from policies import registry
from policies.base import Policy, WorkloadContext
from policies.metric_names import (
    BUDGET_SIGNALS,
    BUILTIN_METRIC_NAMES,
    FIRST_TOKENS_OVER_SLO,
    PROMPT_SPREAD,
    TTFT_SLO,
    WORK_SIGNALS,
)
from policies.pipeline import WorkloadDecider
from policies.predictive.params import budget_block
from policies.spec import (
    DURATION_SCHEMA,
    Activation,
    Behavior,
    Capacity,
    Duration,
    Fallback,
    MetricSpec,
    Seconds,
    Slo,
    StrictModel,
    capacity_metrics,
    parse_duration,
)

DEFAULT_COLD_START_SECONDS = 300
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


def _cold_start(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return parse_duration(value)


ColdStart = Annotated[
    int | Literal["auto"],
    BeforeValidator(_cold_start),
    WithJsonSchema(
        {
            "anyOf": [*DURATION_SCHEMA["anyOf"], {"const": "auto"}],
            "description": "seconds, a duration, or auto (measured)",
        }
    ),
]


class TargetRef(StrictModel):
    kind: Literal["Deployment", "StatefulSet"] = Field(
        default="Deployment", description="the kind whose scale subresource is written"
    )
    api_version: str = Field(default="apps/v1", alias="apiVersion", description="the target's API group/version")
    namespace: str = Field(pattern=DNS_LABEL, max_length=63, description="the target's namespace")
    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253, description="the target's name")


MAX_REPLICAS = 2**31 - 1  # a Deployment's spec.replicas is a 32-bit count
MAX_POLICY_BYTES = 1024 * 1024  # what one ConfigMap holds: a bigger policy file cannot have come from one


class PrometheusConfig(StrictModel):
    url: str = Field(default="http://localhost:9090", description="Prometheus' base URL (http or https, with a host)")
    timeout: Seconds = Field(default=5.0, gt=0, description="per query; a query past it is no value this tick")
    bearer_token_file: str | None = Field(
        default=None,
        alias="bearerTokenFile",
        description="a file holding the bearer token, re-read before each query so a rotated one is used",
    )
    ca_file: str | None = Field(default=None, alias="caFile", description="a CA bundle for an https URL")
    insecure_skip_verify: bool = Field(
        default=False, alias="insecureSkipVerify", description="skip TLS verification (tests only)"
    )
    staleness_seconds: Duration = Field(
        default=120,
        alias="stalenessSeconds",
        ge=1,
        description="a sample older than this is no value (measured from the sample's own timestamp)",
    )

    @field_validator("url")
    @classmethod
    def _a_url(cls, value: str) -> str:
        """Parsed, not just a string: a reload with ``not a url`` would leave every workload holding."""
        return http_url(value)


def http_url(value: str) -> str:
    """``value`` if it is an http(s) URL with a host, else ``ValueError`` saying so: Prometheus's address, or a
    daemon's that ``status --url`` reads."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host")
    return value


class Workload(StrictModel):
    target: TargetRef = Field(description="the Deployment or StatefulSet to scale")
    min_replicas: int = Field(
        default=1, alias="minReplicas", ge=0, le=MAX_REPLICAS, description="the floor; 0 needs an activation block"
    )
    max_replicas: int = Field(alias="maxReplicas", ge=1, le=MAX_REPLICAS, description="the ceiling")
    cold_start_seconds: ColdStart = Field(
        default=DEFAULT_COLD_START_SECONDS,
        alias="coldStartSeconds",
        description="from scale-up to a ready replica; auto: measured from the target's ready count",
    )
    metrics: list[MetricSpec] = Field(
        default_factory=list,
        description="the signals and their targets; may be left out with an slo block (built from capacity)",
    )
    policy: dict[str, Any] = Field(
        default_factory=lambda: {"type": "threshold"}, description="the decision policy and its settings"
    )
    behavior: Behavior = Field(default=Behavior(), description="the HPA v2 behavior block: windows and rate limits")
    fallback: Fallback = Field(default=Fallback(), description="what to do while metrics are missing")
    replicas_query: str | None = Field(
        default=None,
        alias="replicasQuery",
        description="PromQL for the ready count that record writes as ready_replicas; unset: kube-state-metrics'",
    )
    activation: Activation | None = Field(
        default=None, description="what wakes a workload at zero, and how long it idles first"
    )
    slo: Slo | None = Field(
        default=None, description="the latency objective: simulate judges by it, predictive learns capacity by it"
    )
    capacity: Capacity | None = Field(
        default=None,
        description="what one replica sustains within the slo; the metrics are built from it (metrics left out)",
    )

    @model_validator(mode="after")
    def _metrics_from_capacity(self) -> Workload:
        """Without ``metrics``, a ``capacity`` gives them, and ``predictive`` is the policy unless one is named;
        the metrics are left out again when the workload is written out, so that a file round-trips as given."""
        # The model is frozen: these are set once, here, as validation's last step.
        if not self.metrics and not self.names_policy:
            self.__dict__["policy"] = {"type": "predictive"}  # the slo form's policy: it forecasts the flows
        if not self.metrics and self.capacity is not None:
            self.__dict__["metrics"] = capacity_metrics(self.capacity)
        if self.counts_budget and self.slo is None:
            raise ValueError("policy.errorBudget: needs the workload's slo, whose misses it counts")
        return self

    @model_serializer(mode="wrap")
    def _without_derived(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.capacity is not None or not self.metrics:  # a capacity and metrics are never both given
            data.pop("metrics", None)
        return data

    @property
    def learns_capacity(self) -> bool:
        """``predictive`` learns its replicas' capacity (``policies.predictive.capacity``), and so reads the TTFT
        quantile at the slo's target (``metric_names.TTFT_SLO``)."""
        learning = self.capacity is not None and self.capacity.learn and self.slo is not None
        return learning and self.policy_type == "predictive"

    @property
    def counts_budget(self) -> bool:
        """``predictive`` with an ``errorBudget`` counts the slo's misses (which move its utilization, or hand its
        learned headroom back), and so reads what the budget is counted from (``metric_names.BUDGET_SIGNALS``)."""
        return self.policy_type == "predictive" and budget_block(self.policy) is not None

    def histogram_reading(self, name: str) -> float:
        """What a metric read from the TTFT histogram takes of this workload, the daemon's query and the simulator's
        reading alike: the quantile, 0.9 for the p90 and the slo's target for what capacity is learned by; the slo's
        seconds for the first tokens above them (none above an infinite edge without an slo)."""
        if name == FIRST_TOKENS_OVER_SLO:
            return self.slo.ttft_seconds if self.slo is not None else math.inf
        return self.slo.target if name == TTFT_SLO and self.slo is not None else 0.9

    @property
    def extra_signals(self) -> tuple[str, ...]:
        """What the policy reads beyond its metrics: the TTFT quantile a learned capacity is judged by, the
        histogram rates the error budget is counted from, the prompts' spread where its budget is not told it, and
        with a ``utilization`` block the work's counters and queue (each only if its metrics do not already read it)."""
        names = {m.name for m in self.metrics}
        extra = [TTFT_SLO] if self.learns_capacity else []
        if self.counts_budget:
            extra += BUDGET_SIGNALS
            params = registry.parse_params(self.policy).model_dump()
            if params["error_budget"]["prompt_length_sigma"] is None:
                extra.append(PROMPT_SPREAD)  # not given: read from the prompt-length histogram
            if params.get("utilization") is not None:
                extra += WORK_SIGNALS
        return tuple(name for name in dict.fromkeys(extra) if name not in names)

    @property
    def names_policy(self) -> bool:
        """Whether the file names the workload's policy (not the slo form's ``predictive``, set by validation)."""
        return "policy" in self.model_fields_set

    @property
    def needs_capacity(self) -> bool:
        """An slo and neither metrics nor a capacity: ``simulate`` measures the capacity, the daemon cannot run
        it (``run``, ``replay`` and ``record`` say so)."""
        return not self.metrics

    @functools.cached_property
    def key(self) -> str:
        """The workload's name everywhere: ``namespace/name`` of its target (one string object however often asked: the
        daemon keys a dozen maps by it, 5 MB of copies at 10,000 workloads; made once, four times a tick a workload)."""
        return sys.intern(f"{self.target.namespace}/{self.target.name}")

    @property
    def awake_min_replicas(self) -> int:
        """The floor while the workload has replicas: ``minReplicas``, and 1 for one that may go to zero, where
        zero is the activation block's to decide (``policies.activation``)."""
        return max(self.min_replicas, 1)

    @property
    def policy_type(self) -> str:
        return str(self.policy.get("type", "threshold"))

    def context(self, interval: float) -> WorkloadContext:
        """What the policy decides with besides its own block; ``coldStartSeconds: auto`` starts from the default
        and the decider moves it as cold starts are measured (``WorkloadDecider.cold_start_measured``)."""
        auto = self.cold_start_seconds == "auto"
        cold = float(DEFAULT_COLD_START_SECONDS if auto else self.cold_start_seconds)
        return WorkloadContext(
            metrics=tuple(self.metrics),
            min_replicas=self.awake_min_replicas,
            max_replicas=self.max_replicas,
            interval=interval,
            cold_start_seconds=cold,
            behavior=self.behavior.resolved(),
            activation=self.activation,
            slo=self.slo,
            capacity=self.capacity if self.learns_capacity else None,
        )

    def build_policy(self, interval: float, state: Any = None) -> Policy:
        return registry.build(registry.parse_params(self.policy), self.context(interval), state)


class PolicyFile(StrictModel):
    interval: Duration = Field(default=15, ge=1, le=3600, description="seconds between decisions")
    prometheus: PrometheusConfig = Field(default=PrometheusConfig(), description="where the metrics are read")
    workloads: list[Workload] = Field(min_length=1, description="the targets this file scales")

    def decider(self, workload: Workload, previous: WorkloadDecider | None = None) -> WorkloadDecider:
        """A decider for ``workload``, carrying on from ``previous`` (``WorkloadDecider.restore``): its behavior
        history, cold starts and zero always, its policy's state when the policy type is the same."""
        auto = workload.cold_start_seconds == "auto"
        decider = WorkloadDecider(
            workload.context(self.interval), workload.build_policy(self.interval), workload.fallback, auto
        )
        if previous is not None:
            decider.restore(previous.snapshot())
        return decider


class PolicyFileError(Exception):
    """A policy file that cannot be used; ``problems`` holds one ``path: message`` line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def format_loc(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(part, str) and (part.startswith("function-") or part in {"int", "literal['auto']"}):
            continue
        else:
            path += f".{part}" if path else str(part)
    return path or "(file)"


@functools.cache
def _known_keys() -> set[str]:
    """Every key a policy file may hold anywhere (each model's aliases), for "did you mean"."""
    keys: set[str] = set()
    schema = json_schema()
    for model in [schema, *schema.get("$defs", {}).values()]:
        keys.update(model.get("properties", {}))
        for variant in model.get("anyOf", []) + model.get("oneOf", []):
            keys.update(variant.get("properties", {}))
    return keys


def _problems(error: ValidationError, prefix: tuple[Any, ...] = ()) -> list[str]:
    lines = []
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            message = "required field is missing"
        elif item["type"] == "extra_forbidden" and item["loc"]:
            key = str(item["loc"][-1])  # a key known elsewhere in the file is no suggestion for itself
            close = difflib.get_close_matches(key, sorted(_known_keys() - {key}), n=1, cutoff=0.75)
            message = "unknown key" + (f"; did you mean {close[0]!r}?" if close else "")
        lines.append(f"{format_loc(prefix + tuple(item['loc']))}: {message}")
    return list(dict.fromkeys(lines))


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def line_of(text: str, path: str, offset: int = 0) -> int | None:
    """The line (1-based, plus ``offset``) of the YAML node at a problem's field path, or None."""
    try:
        node: Any = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for key, index in _PATH_PART.findall(path):
        if node is None:
            break
        if index and isinstance(node, yaml.SequenceNode) and int(index) < len(node.value):
            node = node.value[int(index)]
        elif key and isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == key), None)
            if match is None:
                break
            line, node = match[0].start_mark.line, match[1]
            continue
        else:
            break
        line = node.start_mark.line
    return None if line is None else line + 1 + offset


def with_lines(problems: list[str], text: str, offset: int = 0) -> list[str]:
    """Each problem with the line its field path points at, where the text has one."""
    out = []
    for problem in problems:
        path = problem.split(": ", 1)[0]
        line = line_of(text, path, offset) if path != "(file)" else None
        out.append(problem if line is None or "line " in problem else f"{problem} (line {line})")
    return out


def _workload_problems(index: int, raw: dict[str, Any], interval: Any) -> list[str]:
    """Checks across fields of one workload, on the raw data so they run even beside shape errors."""
    where = f"workloads[{index}]"
    problems = []
    lo, hi = raw.get("minReplicas", 1), raw.get("maxReplicas")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        problems.append(f"{where}.minReplicas: must not exceed maxReplicas ({lo} > {hi})")
    if lo == 0 and raw.get("activation") is None:
        problems.append(
            f"{where}.minReplicas: 0 needs an 'activation' block: at zero no replica reports a metric, so only a "
            "query with a value while no replica exists (the gateway's queued or arriving requests) can wake it "
            "(docs/policy-file.md#scale-to-zero)"
        )
    elif raw.get("activation") is not None and isinstance(lo, int) and lo > 0:
        problems.append(
            f"{where}.activation: applies only with minReplicas: 0 (here {lo}); remove it, or set minReplicas: 0"
        )
    metrics = raw.get("metrics")
    if not metrics and raw.get("slo") is None:
        problems.append(
            f"{where}.metrics: required unless an slo block is set (then a capacity gives them, or simulate "
            "measures one)"
        )
    if raw.get("capacity") is not None and raw.get("slo") is None:
        problems.append(f"{where}.capacity: is what a replica sustains within an slo; add an slo block")
    if raw.get("capacity") is not None and metrics:
        problems.append(f"{where}.capacity: give metrics or capacity, not both (the metrics are built from capacity)")
    capacity, policy_block = raw.get("capacity"), raw.get("policy")
    named = policy_block.get("type", "threshold") if isinstance(policy_block, dict) else "predictive"
    if isinstance(capacity, dict) and capacity.get("learn") is True and named != "predictive":
        problems.append(f"{where}.capacity.learn: only predictive learns its capacity; this workload runs {named}")
    if isinstance(metrics, list):
        names = [m.get("name") for m in metrics if isinstance(m, dict)]
        repeated = sorted({str(n) for n in names if n is not None and names.count(n) > 1})
        if repeated:
            problems.append(f"{where}.metrics: metric names must be distinct; repeated: {', '.join(repeated)}")
        for i, metric in enumerate(metrics):
            if isinstance(metric, dict) and not metric.get("query") and metric.get("name") not in BUILTIN_METRIC_NAMES:
                problems.append(
                    f"{where}.metrics[{i}].query: required for {metric.get('name')!r}, which has no "
                    f"built-in default ({', '.join(BUILTIN_METRIC_NAMES)})"
                )
    policy = raw.get("policy", {"type": "threshold"})
    prefix: tuple[Any, ...] = ("workloads", index, "policy")
    if not isinstance(policy, dict):
        return [*problems, f"{where}.policy: must be a mapping with a 'type'"]
    try:
        params = registry.parse_params(policy)
    except KeyError as exc:
        return [*problems, f"{format_loc((*prefix, 'type'))}: {exc.args[0]}"]
    except ValidationError as exc:
        return problems + _problems(exc, prefix)
    try:
        workload = Workload.model_validate(raw)
        registry.build(params, workload.context(float(interval) if isinstance(interval, int) else 15.0))
    except ValidationError:
        pass
    except ValueError as exc:
        problems.append(f"{where}.policy: {exc}")
    return problems


def _semantic_problems(data: dict[str, Any]) -> list[str]:
    workloads = data.get("workloads")
    if not isinstance(workloads, list):
        return []
    problems = []
    seen: dict[tuple[str, str, str], int] = {}
    for index, raw in enumerate(workloads):
        if not isinstance(raw, dict):
            continue
        problems.extend(_workload_problems(index, raw, data.get("interval", 15)))
        target = raw.get("target")
        if isinstance(target, dict):
            ref = (str(target.get("kind", "Deployment")), str(target.get("namespace")), str(target.get("name")))
            if ref in seen:
                problems.append(
                    f"workloads[{index}].target: same target as workloads[{seen[ref]}]: {ref[0]} {ref[1]}/{ref[2]}"
                )
            seen.setdefault(ref, index)
    return problems


def parse_policy_document(data: Any, source: str = "<policy>") -> PolicyFile:
    """Validate already-parsed data; raises :class:`PolicyFileError` with every problem."""
    if not isinstance(data, dict):
        raise PolicyFileError(source, ["(file): the policy file must be a mapping with 'workloads'"])
    problems: list[str] = []
    document: PolicyFile | None = None
    try:
        document = PolicyFile.model_validate(data)
    except ValidationError as exc:
        problems.extend(_problems(exc))
    problems.extend(_semantic_problems(data))
    if problems or document is None:
        raise PolicyFileError(source, list(dict.fromkeys(problems)))
    return document


def parse_policy_text(text: str, source: str = "<policy>", line_offset: int = 0) -> PolicyFile:
    """``line_offset``: where ``text`` starts in its file (a ConfigMap's data block), so lines point there."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyFileError(source, [f"(file): {where}not valid YAML or JSON: {problem}"]) from None
    try:
        return parse_policy_document(data, source)
    except PolicyFileError as exc:
        raise PolicyFileError(source, with_lines(exc.problems, text, line_offset)) from None


def read_policy_text(path: str | Path) -> str:
    """A policy file's text: refused before parsing if it is over ``MAX_POLICY_BYTES`` (a 10 MB file stalled a
    tick for seconds) or not UTF-8, each named as what it is."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise PolicyFileError(str(path), [f"(file): cannot read: {exc.strerror or exc}"]) from None
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyFileError(str(path), ["(file): over 1 MiB, more than a ConfigMap holds; refused before parsing"])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyFileError(
            str(path), [f"(file): not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}"]
        ) from None


def load_policy_file(path: str | Path) -> PolicyFile:
    return parse_policy_text(read_policy_text(path), str(path))


def json_schema() -> dict[str, Any]:
    """JSON Schema of the policy file, for editors; policy blocks list every built-in type's keys."""
    schema = PolicyFile.model_json_schema(by_alias=True)
    variants = [cls.Params.model_json_schema(by_alias=True) for cls in registry.available().values()]
    definitions = schema.setdefault("$defs", {})
    for variant in variants:  # a variant's "#/$defs/..." refs resolve against the root document
        definitions.update(variant.pop("$defs", {}))
    policy = definitions["Workload"]["properties"]["policy"]
    definitions["Workload"]["properties"]["policy"] = {"anyOf": variants, **policy, "default": {"type": "threshold"}}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "vllm-autoscaler policy file"
    result: dict[str, Any] = json.loads(json.dumps(schema))
    return result
