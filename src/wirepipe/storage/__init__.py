"""wirepipe.storage.files."""
