# The C loop of src/wirepipe/_sizes.c (optional; wirepipe.core.batch falls back to Python without it).
from typing import Any

def payload_nbytes(values: list[Any], /) -> int | None: ...
