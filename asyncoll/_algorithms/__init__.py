"""Collective algorithms. They speak only in ranks, sequence numbers and array
slices, through the Mesh seam; they never open a socket or see msgpack."""
