"""wirepipe.connectors.nats."""
