"""The shared-memory carrier for large payloads between same-host peers."""
