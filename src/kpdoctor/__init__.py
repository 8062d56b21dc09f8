"""kpdoctor: find out why Kubernetes Services are unreachable on a node, with proof."""

__version__ = "0.1.0"
