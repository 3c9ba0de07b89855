"""The blocking API and its Work: torch.distributed's functions over the one runtime."""
