"""Optional TLS on every connection that carries bytes between hosts (issue 28).

``context`` reads ASYNCOLL_TLS_CERT, ASYNCOLL_TLS_KEY and ASYNCOLL_TLS_CA and
builds Python ``ssl`` contexts from them; ``handshake`` words a failed
handshake for the side that sees it and runs the accepting side's handshake
(on the event loop, and for the direct links' plain sockets).
"""
