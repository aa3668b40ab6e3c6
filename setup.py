"""The one thing pyproject.toml cannot say without a warning: wirepipe's optional C loop (``_sizes.c``, the
payload sizes of a batch). Without a compiler the build goes on and wirepipe uses its pure Python loop."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("wirepipe._sizes", sources=["src/wirepipe/_sizes.c"], optional=True)])
