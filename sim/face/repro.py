"""``loomsim repro FILE``: replay a repro file, its configuration and its fault script.

The file stands for a ``run`` command line (``repro_file.repro_argv``),
replayed by ``sim.face.run`` and compared with its recording: a failure
that did not recur is not a pass (exit 1, and said). A file another
loomsim wrote gets one warning line first.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from sim.face import run
from sim.face.repro_file import read_repro, repro_argv, version_warning


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """``loomsim repro``'s arguments."""
    repro_p = sub.add_parser("repro", help="replay a repro file: its configuration and its fault script")
    repro_p.add_argument("file", help="a loomsim-repro-*.json file written by a failing run")
    repro_p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    repro_p.add_argument("--report", default=None, metavar="DIR",
                         help="also write a report of the replay into DIR (see loomsim run --report)")
    return repro_p


def command(args: argparse.Namespace) -> int:
    """``loomsim repro FILE``."""
    report = ["--report", args.report] if args.report else []
    replay = repro_argv(args.file, json_output=args.json, scenario_modules=args.scenarios) + report
    _warn_other_version(args.file)
    return run.replay(replay)


def _warn_other_version(path: str) -> None:
    """``repro FILE``: one warning line when another loomsim wrote it."""
    from sim.runner import LOOMSIM_VERSION

    warning = version_warning(read_repro(path), path, LOOMSIM_VERSION)
    if warning is not None:
        print(f"loomsim: warning: {warning}", file=sys.stderr)
