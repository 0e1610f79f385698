"""The ``vllm-autoscaler`` command line (docs/contract.md): the parser, and one module per command beside it
(``validate``, ``replay``, ``simulate``, ``calibrate``, ``record``, ``run``, ``status``, ``import_keda``), each of which
parses, calls and prints; what they share is in ``common``. Exit status 2 means bad input."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from autoscaler import __version__
from autoscaler.cli import calibrate, import_keda, record, replay, run, simulate, status, validate
from autoscaler.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    QUIET,
    Terminated,
    _error,
    _raise_terminated,
)


def _common_flags(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        "--debug",
        dest="debug",
        action="store_true",
        default=default,
        help="show the traceback of an unexpected error",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="no notes and no progress on standard error"
    )


def _parented(common: argparse.ArgumentParser) -> type[argparse.ArgumentParser]:
    """A subcommand parser class that inherits ``common``'s flags."""

    class Subcommand(argparse.ArgumentParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["parents"] = [common, *kwargs.get("parents", [])]
            super().__init__(*args, **kwargs)

    return Subcommand


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-autoscaler",
        description="Autoscale vLLM Deployments on vLLM's own Prometheus metrics.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _common_flags(parser, default=False)
    # The same flags after the command too (`simulate ... -q`); SUPPRESS keeps a flag given before it.
    common = argparse.ArgumentParser(add_help=False)
    _common_flags(common, default=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_parented(common))

    validate.add_parser(sub)
    replay.add_parser(sub)
    run.add_parser(sub)
    record.add_parser(sub)
    simulate.add_parser(sub)
    calibrate.add_parser(sub)
    status.add_parser(sub)
    import_keda.add_parser(sub)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code not in (0, None) else EXIT_OK
    from policies.registry import broken_plugins

    QUIET["on"] = bool(args.quiet)
    for name, error in broken_plugins().items():
        _error(f"warning: policy plug-in {name!r} failed to load, so type {name!r} is unavailable: {error}")
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if on_main_thread else None
    try:
        result: int = args.func(args)
    except KeyboardInterrupt:  # Ctrl-C during a long simulate, replay or record: no traceback
        _error("interrupted")
        return EXIT_INTERRUPTED
    except Terminated:
        _error("terminated")
        return EXIT_TERMINATED
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "simulations" or args.debug:
            raise
        _error(f"{args.command} needs the simulator, which the daemon's image leaves out: pip install vllm-autoscaler")
        return EXIT_FAILED
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if args.debug:
            raise
        detail = str(exc).splitlines()[0][:300] if str(exc) else ""
        _error(f"internal error: {type(exc).__name__}: {detail} (--debug shows the traceback)")
        return EXIT_FAILED
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)
    return result
