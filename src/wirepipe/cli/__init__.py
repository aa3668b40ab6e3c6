"""The ``wirepipe`` command line: the application in ``app``, one module per command group.

Importing a group's module registers its commands; the order below is the order ``--help`` lists them in.
"""

# isort: off
from . import runs  # noqa: F401 - run, validate, server
from . import services  # noqa: F401 - ps, top
from . import traffic  # noqa: F401 - capture, replay, tap
from . import pipetests  # noqa: F401 - test
from . import study  # noqa: F401 - bench, report, plan, codecs, datasets
from . import schemas  # noqa: F401 - schema
from . import dicts  # noqa: F401 - dict
# isort: on
from .app import app, main

__all__ = ["app", "main"]
