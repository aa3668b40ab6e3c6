"""Doctest collection of ``src/wirepipe`` (pytest's ``--doctest-modules``, see pyproject).

``python -m pytest -q`` imports every module of the package to run its docstring examples. The
modules below import an optional heavy library at import time: importing them during collection
would slow every run and let that library's import side effects (logging set-up, plugin
registration) reach tests that never asked for it. Their own tests import them on purpose.
"""

collect_ignore = [
    # imports apache_beam at import time (the Beam worker's DoFn); tests/test_replay.py covers it
    "src/wirepipe/replay/beam_fn.py",
    # imports faust (and through it mode, aiohttp, ...) at import time; tests/test_faust.py covers it
    "src/wirepipe/integrations/faust.py",
]
