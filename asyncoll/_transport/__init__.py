"""The transport: peers and tags, never groups or operations.

``base.py`` holds the seams (Mesh for the algorithms, MeshControl and
Listener for the group layer), ``inbox.py`` the one place a peer's frames
meet their receives, ``tcp/`` the TCP carrier, ``shm/`` the shared-memory
rings same-host peers use for large payloads, ``links.py`` (and ``link_*.py``)
a group's own connections across hosts, used from the calling thread. (The tests' mesh of direct
calls, a second implementation of the seams, is tests/transport/memory_mesh.py:
a test double does not ship in the package.)
"""
