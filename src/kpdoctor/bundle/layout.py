"""The bundle layout of DESIGN.md: where each artifact lives inside a bundle.

This is a contract between collection and checks; new artifacts get new paths, never a reuse of
an old one.
"""

from __future__ import annotations

from kpdoctor.bundle.artifacts import Kind

# path inside a bundle -> (kind, attributes)
BUNDLE_PATHS: dict[str, tuple[Kind, dict[str, str]]] = {
    "node/hostname": (Kind.HOSTNAME, {}),
    "node/uname.txt": (Kind.UNAME, {}),
    "node/os-release": (Kind.OS_RELEASE, {}),
    "node/iptables-version.txt": (Kind.IPTABLES_VERSION, {"scope": "host"}),
    "node/iptables-legacy-save.txt": (Kind.IPTABLES_SAVE, {"backend": "legacy", "family": "4"}),
    "node/iptables-nft-save.txt": (Kind.IPTABLES_SAVE, {"backend": "nft", "family": "4"}),
    "node/ip6tables-legacy-save.txt": (Kind.IPTABLES_SAVE, {"backend": "legacy", "family": "6"}),
    "node/ip6tables-nft-save.txt": (Kind.IPTABLES_SAVE, {"backend": "nft", "family": "6"}),
    "node/ipvsadm-list.txt": (Kind.IPVSADM, {}),
    "node/ipvsadm-save.txt": (Kind.IPVSADM, {"format": "save"}),
    "node/ipvsadm-timeout.txt": (Kind.IPVSADM, {"format": "timeout"}),
    "node/ip_vs_conn.txt": (Kind.IPVS_CONNECTIONS, {}),  # IPVS's connection table (/proc/net/ip_vs_conn)
    "node/ethtool-k-vxlan.txt": (Kind.NIC_FEATURES, {}),  # `ethtool -k` of the node's VXLAN device
    "node/cni-config.json": (Kind.CNI_CONFIG, {}),  # the CNI network configuration in use
    "node/processes.txt": (Kind.PROCESSES, {}),
    "node/ip-addr.json": (Kind.IP_ADDR, {}),
    "node/nft-ruleset.json": (Kind.NFT_RULESET, {}),
    "node/nft-ruleset.txt": (Kind.NFT_RULESET_TEXT, {}),
    "node/nft-version.txt": (Kind.NFT_VERSION, {}),
    "node/ipset-save.txt": (Kind.IPSET, {}),
    "node/locks.txt": (Kind.LOCKS, {}),
    "node/modules.txt": (Kind.MODULES, {}),
    "node/kernel-config.txt": (Kind.KERNEL_CONFIG, {}),  # /proc/config.gz unpacked, or /boot/config-RELEASE
    "node/sysctl.txt": (Kind.SYSCTL, {}),
    "node/ip-link.json": (Kind.IP_LINK, {}),
    "node/dmesg.txt": (Kind.KERNEL_LOG, {}),
    "node/conntrack-list.txt": (Kind.CONNTRACK_ENTRIES, {}),
    "kube-proxy/log.txt": (Kind.KUBE_PROXY_LOG, {}),
    "kube-proxy/log-previous.txt": (Kind.KUBE_PROXY_LOG, {"previous": "true"}),
    # a host kube-proxy's standard output, when it goes to another file than its log (its stderr)
    "kube-proxy/log-stdout.txt": (Kind.KUBE_PROXY_LOG, {"stream": "stdout"}),
    "kube-proxy/cmdline.txt": (Kind.KUBE_PROXY_CMDLINE, {}),
    "kube-proxy/config.yaml": (Kind.KUBE_PROXY_CONFIG, {}),
    "kube-proxy/version.txt": (Kind.KUBE_PROXY_VERSION, {}),
    "kube-proxy/healthz.json": (Kind.KUBE_PROXY_HEALTHZ, {}),
    "kube-proxy/metrics.txt": (Kind.KUBE_PROXY_METRICS, {}),
    "kube-proxy/proxy-mode.txt": (Kind.KUBE_PROXY_MODE, {}),
    "kube-proxy/iptables-version.txt": (Kind.IPTABLES_VERSION, {"scope": "kube-proxy"}),
    "cluster/services.json": (Kind.K8S_OBJECTS, {}),
    "cluster/endpointslices.json": (Kind.K8S_OBJECTS, {}),
    "cluster/endpoints.json": (Kind.K8S_OBJECTS, {}),
    "cluster/nodes.json": (Kind.K8S_OBJECTS, {}),
    "cluster/pods.json": (Kind.K8S_OBJECTS, {}),
    "cluster/workloads.json": (Kind.K8S_OBJECTS, {}),
    "cluster/daemonsets.json": (Kind.K8S_OBJECTS, {}),
    "cluster/configmaps.json": (Kind.K8S_OBJECTS, {}),
}

# Counter snapshots: node/counters/T0/<file> and node/counters/T1/<file> (some seconds later).
COUNTER_FILES: dict[str, Kind] = {
    "conntrack-stats.txt": Kind.CONNTRACK_STATS,
    "nf_conntrack-stat.txt": Kind.NF_CONNTRACK_STAT,
    "arp_cache-stat.txt": Kind.NEIGH_STATS,
    "ndisc_cache-stat.txt": Kind.NEIGH_STATS,
    "softnet_stat.txt": Kind.SOFTNET_STAT,
    "netstat-s.txt": Kind.NETSTAT,
    "nstat.txt": Kind.NSTAT,
    "ss-ltnp.txt": Kind.LISTENERS,
}
SNAPSHOTS = ("T0", "T1")
for _snap in SNAPSHOTS:
    for _file, _kind in COUNTER_FILES.items():
        BUNDLE_PATHS[f"node/counters/{_snap}/{_file}"] = (_kind, {"snapshot": _snap})

# Paths a bundle may hold that this version does not analyse yet (not "unrecognised").
KNOWN_UNUSED_PREFIXES = (
    "node/ip-route.json",
)
