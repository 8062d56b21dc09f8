"""The data plane: evaluate the node's actual forwarding rules as a packet would traverse them."""
