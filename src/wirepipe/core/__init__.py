"""The lowest layer, imported by every other: errors and exit codes, human units, redaction of secrets, the
config building blocks and field paths, the columnar ``Batch``, the lazy registries and the allocator policy.
Nothing here imports a third-party library at import time."""
