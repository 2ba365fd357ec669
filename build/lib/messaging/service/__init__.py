"""What Courier does, as plain functions on the store: sending, reading, the directory."""
