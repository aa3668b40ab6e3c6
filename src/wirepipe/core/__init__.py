"""wirepipe.core."""
