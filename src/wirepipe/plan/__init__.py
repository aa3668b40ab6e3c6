"""wirepipe.plan."""
