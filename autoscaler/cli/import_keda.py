"""``vllm-autoscaler import-keda``: the policy file equivalent to a KEDA ScaledObject."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from autoscaler.cli.common import EXIT_BAD_INPUT, EXIT_OK, _error
from policies.policy_file import (
    PolicyFileError,
)


def cmd_import_keda(args: argparse.Namespace) -> int:
    from autoscaler.keda_import import KedaImportError, convert_text, merge

    try:
        text = sys.stdin.read() if args.scaledobject == "-" else Path(args.scaledobject).read_text(encoding="utf-8")
        conversion = merge(convert_text(text, args.as_is))
    except (OSError, UnicodeDecodeError) as exc:
        _error(f"{args.scaledobject}: cannot read: {exc}")
        return EXIT_BAD_INPUT
    except (KedaImportError, PolicyFileError) as exc:
        _error(f"{args.scaledobject}: {exc}")
        return EXIT_BAD_INPUT
    for warning in conversion.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(conversion.yaml(), end="")
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``import-keda`` command's arguments."""
    p = sub.add_parser("import-keda", help="print the policy file equivalent to a KEDA ScaledObject")
    p.add_argument("scaledobject", metavar="SCALEDOBJECT.yaml", help="a file, or - for standard input")
    p.add_argument(
        "--as-is",
        action="store_true",
        help="keep KEDA's semantics, mistakes included (for a side-by-side shadow run); default: corrected",
    )
    p.set_defaults(func=cmd_import_keda)
