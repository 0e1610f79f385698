"""What every command shares: exit codes, one-line errors and notes, argument checks, loading a policy file."""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from policies.policy_file import (
    PolicyFile,
    PolicyFileError,
    parse_policy_text,
)
from policies.spec import parse_duration

if TYPE_CHECKING:
    from autoscaler.settings import Settings


EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

EXIT_INTERRUPTED = 130  # the shell's 128 + SIGINT

EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(BaseException):
    """SIGTERM, raised where the command is, so that it unwinds as on Ctrl-C: worker processes stopped, no
    traceback. ``run`` installs its own handler (a clean shutdown)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


QUIET = {"on": False}  # -q: no notes, no progress; errors are always said


def _error(message: str) -> None:
    print(f"vllm-autoscaler: {message}", file=sys.stderr)


def _note(message: str) -> None:
    if not QUIET["on"]:
        print(f"vllm-autoscaler: note: {message}", file=sys.stderr)


def _unwritable(*paths: str | None) -> str | None:
    """Why an output file cannot be written, checked before the work that produces it; ``None`` if all can."""
    for path in paths:
        if not path or path == "-":
            continue
        target = Path(path)
        folder = target.parent if str(target.parent) else Path(".")
        if target.is_dir():
            return f"{path}: is a directory"
        if not folder.is_dir():
            return f"{path}: no such directory {folder}"
        if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
            return f"{path}: not writable"
    return None


def _finite(text: str) -> float:
    """An option's number: ``inf`` and ``nan`` parse as floats but mean nothing as seconds or fractions."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _seconds(text: str) -> float:
    """A flag's seconds, in the policy file's syntax: a number (``300``, ``0.5``) or a duration (``5m``)."""
    try:
        float(text)
    except ValueError:
        pass
    else:
        return _finite(text)
    try:
        return float(parse_duration(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not seconds or a duration such as 90s, 5m or 1h30m") from None


def _window(text: str) -> tuple[int, int | None]:
    """``START:END``, each a duration (``7d``, ``36h``, ``90m``, seconds) after the trace's first request;
    either may be left out (``:2d``, ``30d:``)."""
    start, colon, end = text.partition(":")
    try:
        if not colon:
            raise ValueError("no ':'")
        first = parse_duration(start) if start.strip() else 0
        last = parse_duration(end) if end.strip() else None
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not START:END, each a duration such as 7d, 36h, 90m or seconds (either may be left out)"
        ) from None
    if last is not None and last <= first:
        raise argparse.ArgumentTypeError(f"{text!r}: the window ends before it starts")
    return first, last


def _whole_number(least: int) -> Callable[[str], int]:
    """An option's count: a whole number of at least ``least`` (``--seed`` 0, ``--jobs`` 1)."""

    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < least:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, {least} or more")
        return int(text)

    return parse


_seed, _jobs = _whole_number(0), _whole_number(1)


def _no_plotting(plot: str | None) -> str | None:
    """Why ``--plot`` cannot be drawn (matplotlib is the ``[sim]`` extra), said before the work; None if it can."""
    if not plot:
        return None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib: pip install 'vllm-autoscaler[sim]'"
    return None


def _write_failed(exc: OSError, path: str | None) -> int:
    """An output that passed ``_unwritable`` and still failed (a full disk, a vanished folder): one line,
    exit 1, whatever was already printed kept."""
    _error(f"cannot write {exc.filename or path}: {exc.strerror or exc}")
    return EXIT_FAILED


def _load(path: str, manifests: bool = True) -> PolicyFile | None:
    """The policy of ``--config``: a policy file, or (with ``manifests``) what a user applies and ``validate``
    reads, a ConfigMap or a kustomize directory that holds exactly one policy."""
    try:
        texts = _policy_texts(path)
        if len(texts) > 1:
            sources = "; ".join(source for source, _, _ in texts)
            raise PolicyFileError(path, [f"(file): holds {len(texts)} policies ({sources}): give one as a file"])
        source, text, offset = texts[0]
        if source != path and not manifests:
            raise PolicyFileError(
                path,
                [
                    f"(file): {source.removeprefix(path + ': ')} holds the policy; run reads a policy file (the pod "
                    "mounts the ConfigMap's key as one): give that file"
                ],
            )
        return parse_policy_text(text, source, offset)
    except PolicyFileError as exc:
        _error(f"{exc.source}: invalid policy file")
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def _field(node: Any, key: str) -> Any:
    """The value node under ``key`` of a YAML mapping node (None if absent or not a mapping)."""
    if not isinstance(node, yaml.MappingNode):
        return None
    return next((v for k, v in node.value if getattr(k, "value", None) == key), None)


def _policy_texts(path: str) -> list[tuple[str, str, int]]:
    """Each policy that what a user applies holds, as ``(source, text, line offset)``: a policy file as it
    is; a ConfigMap (or a file of several documents) by each ``data`` key that holds a policy; a kustomize
    directory by the ConfigMaps ``kubectl kustomize`` renders. Raises ``PolicyFileError`` if unreadable."""
    folder = Path(path)
    if folder.is_dir():
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            raise PolicyFileError(path, ["(file): a kustomize directory needs kubectl to render it"])
        done = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise PolicyFileError(path, [f"(file): kubectl kustomize failed: {done.stderr.strip()[:300]}"])
        text, offsets = done.stdout, False
    else:
        try:
            text = folder.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyFileError(path, [f"(file): cannot read: {exc}"]) from None
        offsets = True
    try:
        nodes = [n for n in yaml.compose_all(text) if n is not None]
    except yaml.YAMLError:
        return [(path, text, 0)]  # let the policy parser word the syntax error
    found: list[tuple[str, str, int]] = []
    objects = [node for node in nodes if _field(node, "kind") is not None]
    for node in objects:
        data = _field(node, "data")
        if getattr(_field(node, "kind"), "value", None) != "ConfigMap" or not isinstance(data, yaml.MappingNode):
            continue
        name = getattr(_field(_field(node, "metadata"), "name"), "value", "?")
        for key, value in data.value:
            body = getattr(value, "value", "")
            if isinstance(body, str) and (key.value.endswith((".yaml", ".yml", ".json")) or "workloads" in body):
                offset = (value.start_mark.line + (1 if value.style in ("|", ">") else 0)) if offsets else 0
                found.append((f"{path}: ConfigMap {name}, {key.value}", body, offset))
    if objects and not found:
        kinds = {getattr(_field(node, "kind"), "value", None) for node in objects}
        hint = (
            f"; a KEDA ScaledObject: `vllm-autoscaler import-keda {path}` writes its policy"
            if "ScaledObject" in kinds
            else ""
        )
        raise PolicyFileError(
            path, [f"(file): no ConfigMap here holds a policy (a data key ending .yaml or .json){hint}"]
        )
    return found or [(path, text, 0)]


def _settings(args: argparse.Namespace) -> Settings | None:
    """Settings from the environment, with this command's flags on top; ``None`` after reporting a bad one."""
    from pydantic import ValidationError

    from autoscaler.settings import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        _error(f"bad VLLM_AUTOSCALER_* setting: {'.'.join(map(str, first['loc']))}: {first['msg']}")
        return None
    if getattr(args, "prometheus_url", None):
        settings.prometheus_url = args.prometheus_url
    if getattr(args, "kubeconfig", None):
        settings.kubeconfig = args.kubeconfig
    if getattr(args, "dry_run", False):
        settings.dry_run = True
    return settings
