"""kube-proxy's nftables mode (and every other writer's nftables rules on the node)."""
