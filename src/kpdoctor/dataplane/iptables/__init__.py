"""kube-proxy's iptables mode: compile ``iptables-save`` rules, walk packets through them, and
serve the verifier and ``trace`` as a :class:`~kpdoctor.dataplane.backend.Backend`."""
