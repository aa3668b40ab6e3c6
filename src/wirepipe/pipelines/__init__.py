"""Pipelines: assembly and run loop (``pipeline``), YAML config (``config``)."""
