"""Rule-synchronisation failures: kube-proxy cannot program the node (TAXONOMY.md, first part)."""
