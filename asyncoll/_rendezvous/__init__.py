"""Rendezvous: the coordinator's pure state machine and the peer's client for it."""
