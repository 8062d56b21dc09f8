"""kube-proxy's IPVS mode: virtual servers, real servers and ipsets (what kpdoctor reads of it)."""
