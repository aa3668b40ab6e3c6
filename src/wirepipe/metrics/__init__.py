"""wirepipe.metrics."""
