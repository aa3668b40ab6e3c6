"""``wirepipe plan``: the capacity model, from microseconds per record to a deployment (``capacity``)."""
