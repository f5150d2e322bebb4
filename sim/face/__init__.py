"""The face: what a user touches — the ``loomsim`` command and its files.

``cli`` (the command line's dispatcher), one module per command (``run``,
``listing``, ``repro``, ``shrink``, ``sweep``, ``merge``, ``mutants``,
``determinism``, ``describe``, ``bench``) around ``options`` (the parser
and the flags they share) and ``children`` (their child processes),
``repro_file`` (the ``loomsim-repro/1`` format and the command
line a repro file stands for) and ``discovery`` (loading a user's scenario
modules). The face may import ``scenarios/``; the engine (everything else in
``sim/``) never imports the face.
"""
