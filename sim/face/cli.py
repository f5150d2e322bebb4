"""The command line: ``loomsim`` (also ``python -m sim``).

Exit codes: 0 every invariant held, 1 an invariant was violated (a sweep: a
seed failed or a saved failure still fails; with --require-coverage, a
coverage gap; shrink: the shrunk run it wrote fails) or the run did not
test what it was asked to (a repro whose recorded failure did not recur, a
--mutant whose patched code never ran), 2 usage error (unknown
scenario, malformed seed/duration/flag, unusable database or trace path, a
scenario module that cannot be loaded), 3 infrastructure error (a sweep's or
``mutants``' child crashed or printed no result), 128 + the signal when
SIGINT (130) or SIGTERM (143) stopped it. Usage errors are one line on
stderr, never a traceback.

``--scenarios MODULE`` (repeatable) is a global option, before the command:
the user's scenario modules (``sim.face.discovery``), loaded with the
``loomsim.scenarios`` entry points before the parser is built (a user
scenario's parameters are flags).

This module is the dispatcher only: each command is its own module with
an ``add_parser(sub)`` (its subcommand and flags) and a ``command(args)``
(``COMMANDS``); the parser, its value types, ``UsageError`` and the flags
the commands share are ``sim.face.options``; the child processes of
``sweep``, ``mutants``, ``check-determinism`` and ``bench`` are
``sim.face.children``; the repro file's format is ``sim.face.repro_file``.
"""
from __future__ import annotations

import os
import sys
from typing import Sequence

from sim.face import (bench, check_history, describe, determinism, discovery, explore, listing, live, merge, mutants,
                      repro, run, shrink, sweep)
from sim.face.children import Interrupted, sigterm_interrupts
from sim.face.options import Parser, UsageError, parse, root_parser
from sim.face.repro_file import ReproFileError

EXIT_PASS = 0
EXIT_VIOLATION = 1
EXIT_USAGE = 2
EXIT_ERROR = 3  # infrastructure: a child of a sweep crashed or printed no result
# Each command's module, in the order ``loomsim --help`` lists them.
COMMANDS = {"list": listing, "repro": repro, "shrink": shrink, "bench": bench, "run": run, "mutants": mutants,
            "sweep": sweep, "merge": merge, "check-determinism": determinism, "describe": describe,
            "explore": explore, "live": live, "check-history": check_history}


def main(argv: Sequence[str] | None = None) -> int:
    # A failure message may quote a lone surrogate (an adversary's key): print
    # it as its \uXXXX escape rather than crash on the way out.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "encoding", None):
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
    try:
        with sigterm_interrupts():  # SIGTERM cleans up on the way out, as SIGINT does
            return _main(list(sys.argv[1:] if argv is None else argv))
    except (UsageError, ReproFileError, discovery.ScenarioModuleError) as error:
        print(f"loomsim: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("loomsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (``loomsim list --faults | head``): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PASS
    except Interrupted as error:
        stopped = f"; stopped {error.stopped} running child run(s)" if error.stopped else ""
        print(f"loomsim: interrupted by {error}{stopped}; no summary", file=sys.stderr)
        return 128 + error.signum


def _main(argv: list[str]) -> int:
    _, args = parse(argv, [module.add_parser for module in COMMANDS.values()])
    if args.version and args.command is None:
        print(f"loomsim {version()}")
        return EXIT_PASS
    if args.command is None:
        raise UsageError("no command given: expected one of list, run, sweep, explore, merge, check-determinism, "
                         "describe, mutants, repro, shrink, bench, live, check-history (see loomsim --help)")
    return COMMANDS[args.command].command(args)


def build_parser() -> Parser:
    """``loomsim``'s whole parser: the global options and every command's."""
    parser, sub = root_parser()
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def version() -> str:
    """The installed package's version (the runner's own when not installed)."""
    from importlib import metadata

    from sim.runner import LOOMSIM_VERSION

    try:
        return metadata.version("loomsim")
    except metadata.PackageNotFoundError:
        return LOOMSIM_VERSION


if __name__ == "__main__":
    sys.exit(main())
