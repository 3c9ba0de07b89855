"""The data plane: connections to peers and the mesh that routes frames to receives."""
