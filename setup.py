"""The one thing pyproject.toml cannot say without a warning: wirepipe's optional C loops (``_sizes.c``, the
payload sizes of a batch; ``_frames.c``, a subscription's messages cut out of a NATS read). Without a compiler
the build goes on and wirepipe uses its pure Python loops."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("wirepipe._sizes", sources=["src/wirepipe/_sizes.c"], optional=True),
                   Extension("wirepipe._frames", sources=["src/wirepipe/_frames.c"], optional=True)])
