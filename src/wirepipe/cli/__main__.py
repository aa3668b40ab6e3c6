"""``python -m wirepipe.cli``: the command line (what the ``wirepipe`` script runs)."""

from wirepipe.cli import main

main()
