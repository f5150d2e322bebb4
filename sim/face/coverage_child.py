"""The child side of ``sweep --model-coverage``: ``python -m sim.face.coverage_child OUTFILE -- ARGV...``.

Installs ``model_coverage``'s line recorder, runs the CLI on ARGV (a
sweep's usual child, ``run ... --json``) and writes the lines of ``model/``
it executed to OUTFILE. An entry point: it runs the CLI, and no face
module imports it (``children.start_child`` starts it by name).
"""
from __future__ import annotations

import json
import sys
from typing import Sequence

from sim.face import model_coverage


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sim.face.coverage_child OUTFILE -- ARGV...``: run the CLI
    on ARGV with the tracer on; write the executed lines to OUTFILE (also
    when the run fails: its lines count too). Returns the CLI's exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[1] != "--":
        print("usage: python -m sim.face.coverage_child OUTFILE -- LOOMSIM-ARGS...", file=sys.stderr)
        return 2
    out, cli_argv = args[0], args[2:]
    recorder = model_coverage.LineRecorder()
    recorder.start()  # before the CLI is imported: model/'s module bodies count too
    try:
        from sim.face import cli

        code = cli.main(cli_argv)
    finally:
        # CPython switches a tracer off for good when calling it raises (a
        # RecursionError deep in the run does): say so, the lines after it
        # went unrecorded and the figure is a floor.
        lost = sys.gettrace() is not recorder
        recorder.stop()
        with open(out, "w", encoding="utf-8") as stream:
            json.dump(recorder.to_json(lost=lost), stream)
    return code


if __name__ == "__main__":
    sys.exit(main())
