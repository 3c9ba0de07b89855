"""The TCP carrier: a mesh of one connection per peer, its framing and its handshake."""
