"""Lab helpers: stage a node's netfilter state in throw-away network namespaces."""
