"""Bridges to other stream frameworks (Faust).

Nothing is imported here: each integration is its own module and imports its
framework when it is used, so ``wirepipe --help`` never pays for them.
"""
