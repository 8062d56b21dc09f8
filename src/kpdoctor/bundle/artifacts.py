"""Artifacts: named pieces of raw evidence, each typed, each knowing where it came from.

Checks only ever see artifacts (through parsed facts), so a live run and an offline run of the
same node give the same report.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Kind(enum.StrEnum):
    """What an artifact is. The values are stable names used in reports ('missing X')."""

    KUBE_PROXY_LOG = "kube-proxy log"
    IPTABLES_SAVE = "iptables-save output"
    IPTABLES_RULES_S = "iptables -S output"
    IPTABLES_LIST = "iptables -L -n -v output"
    IPTABLES_VERSION = "iptables --version"
    KUBE_PROXY_VERSION = "kube-proxy --version"
    UNAME = "uname"
    OS_RELEASE = "/etc/os-release"
    PROCESSES = "process list"
    LOCKS = "/proc/locks"
    KUBE_PROXY_CMDLINE = "kube-proxy command line"
    KUBE_PROXY_CONFIG = "KubeProxyConfiguration"
    K8S_OBJECTS = "Kubernetes objects"
    HOSTNAME = "hostname"
    MODULES = "/proc/modules"
    IPVSADM = "ipvsadm output"
    IP_ADDR = "ip -j addr output"
    NFT_RULESET = "nft -j list ruleset output"
    NFT_RULESET_TEXT = "nft list ruleset output"
    NFT_VERSION = "nft --version"
    IPSET = "ipset output"
    KUBE_PROXY_HEALTHZ = "kube-proxy /healthz"
    KUBE_PROXY_METRICS = "kube-proxy /metrics"
    KUBE_PROXY_MODE = "kube-proxy /proxyMode"  # the mode it runs, in one word (its metrics server)
    CONNTRACK_STATS = "conntrack -S output"
    NF_CONNTRACK_STAT = "/proc/net/stat/nf_conntrack"
    CONNTRACK_ENTRIES = "conntrack -L output"
    SYSCTL = "sysctl output"
    NETSTAT = "netstat -s output"
    NSTAT = "nstat output"
    LISTENERS = "ss -ltn output"
    IP_LINK = "ip link output"
    KERNEL_LOG = "kernel log (dmesg)"
    HOST_FIREWALL = "host firewall status (ufw)"
    STOP_TIMING = "timed container stop"  # `time docker stop X`, `time kubectl delete pod X`
    RUNTIME_LOG = "container runtime log"  # dockerd/podman/containerd lines: a stop that timed out
    KUBECTL_PODS = "kubectl get pods table"
    KUBECTL_TABLE = "kubectl get services/nodes table"  # read into partial objects (parse/kubectl_table)
    KUBECTL_DESCRIBE = "kubectl describe services/nodes"  # read into partial objects (parse/kubectl_describe)
    PRESTOP_SCRIPT = "preStop hook script"
    PACKAGES = "package versions (rpm -q, dpkg -s, dpkg -l)"
    LINE_COUNT = "line count (| wc -l, grep -c)"  # `iptables -L -n | grep X | wc -l` -> 4190
    CONNECT_TIMES = "load-test connect times (ab, hey)"  # where connects bunch: dropped SYNs
    SSH_ATTEMPTS = "ssh attempts"  # `ssh root@192.168.1.3` and the failure it printed
    PACKET_CAPTURE = "tcpdump output"  # packets as tcpdump -n prints them (parse/tcpdump)
    NIC_STATS = "ethtool -S output"  # a network driver's own counters (parse/ethtool)
    NIC_FEATURES = "ethtool -k output"  # an interface's offload features (parse/ethtool)
    CNI_CONFIG = "CNI network configuration"  # /etc/cni/net.d/*.conf(list) (parse/cni)
    LOOKUP_TIMING = "timed name lookups"  # `time nslookup x`, dig's timed-out tries, curl -w (parse/lookups)
    SHELL_TRACE = "shell trace (set -x)"  # an entry script's traced commands, the values it read (parse/xtrace)
    IPVS_CONNECTIONS = "IPVS connection table"  # ipvsadm -Lnc, /proc/net/ip_vs_conn (parse/ipvs_conn)
    SOFTNET_STAT = "/proc/net/softnet_stat"  # each CPU's receive backlog and its drops (parse/softnet)
    NEIGHBOURS = "ip neigh output"  # the neighbour entries a node lists: ip neigh, arp -n (parse/neighbours)
    NEIGH_STATS = "neighbour table counters"  # /proc/net/stat/arp_cache, ip -s ntable (parse/neigh_stats)
    ARP_REPLIES = "arping output"  # which MACs answered ARP for an address (parse/arping)
    KERNEL_CONFIG = "kernel build configuration"  # /boot/config-*, /proc/config.gz, check-config (parse/kernel_config)


# What describes the node (versions, identity) without showing its state: evidence to weigh other
# evidence by. A run given only these has checked nothing, whatever checks ran on them.
CONTEXT_KINDS = frozenset(
    {
        Kind.IPTABLES_VERSION, Kind.KUBE_PROXY_VERSION, Kind.KUBE_PROXY_MODE, Kind.UNAME, Kind.OS_RELEASE,
        Kind.HOSTNAME, Kind.PACKAGES,
    }
)  # fmt: skip


# The node's dataplane as each network namespace holds its own: kube-proxy's rules, virtual
# servers and sets, the node's addresses and links, the connection tracking its NAT works in.
# Read inside another namespace (``ip netns exec``, ``nsenter -t PID -n``) they are a Pod's, not
# the node's. A Pod's sockets, TCP counters and settings are not among them: a listen queue that
# overflows in a Pod's namespace is that Pod's real problem (seed 004), and said with its scope.
NETNS_KINDS = frozenset(
    {
        Kind.IPTABLES_SAVE, Kind.IPTABLES_RULES_S, Kind.IPTABLES_LIST, Kind.NFT_RULESET, Kind.NFT_RULESET_TEXT,
        Kind.IPVSADM, Kind.IPSET, Kind.IP_ADDR, Kind.IP_LINK, Kind.CONNTRACK_ENTRIES, Kind.CONNTRACK_STATS,
        Kind.NF_CONNTRACK_STAT, Kind.IPVS_CONNECTIONS,
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Artifact:
    """One typed piece of evidence.

    ``name`` is what reports cite (a bundle path such as ``kube-proxy/log.txt`` or the user's
    file name). ``first_line`` is the line number of the artifact's first line in the user's
    original file (not 1 when the artifact is a command's output inside a transcript), so
    evidence line numbers always point into the file the user has.
    """

    name: str
    kind: Kind
    text: str = ""
    path: str | None = None  # file holding the whole artifact, read lazily (large logs)
    first_line: int = 1
    attrs: dict[str, str] = field(default_factory=dict)
    size: int = 0
    # what the text parses to, when its source keeps it parsed (the node agent's watched objects:
    # a kpdoctor.parse.k8s.Objects); None: parsed from the text like any other
    parsed: object | None = field(default=None, repr=False, compare=False)
    # the file here it was read from whole (a folder bundle's member, a loose file), when it was
    # read into ``text``: a report that shows context reads the cited lines there again
    origin: str | None = None

    def read_text(self) -> str:
        if self.path is None:
            return self.text
        with open(self.path, encoding="utf-8-sig", errors="replace") as fh:
            return fh.read()

    @property
    def snapshot(self) -> str | None:
        """``T0``/``T1`` for the counter snapshots of a bundle (node/counters/T0/...)."""
        return self.attrs.get("snapshot")

    @property
    def previous(self) -> bool:
        """True for the log of a previous (crashed) container."""
        return self.attrs.get("previous") == "true"


# The one command that gives every kind of evidence at once.
LIVE_RUN = "`kpdoctor diagnose --live` on the node"
# How to give each kind of evidence (Kind values), said to a user who gave too little (a skipped
# check's hint, a suspected cause's deciding command, what a run that covered little asks for).
HOW_TO_GIVE = {
    "kube-proxy log": "`kubectl -n kube-system logs <kube-proxy pod>` (add `-p` after a crash)",
    "Kubernetes objects": "`kubectl get svc,endpointslices -A -o yaml` and the Node (`kubectl get node NAME -o yaml`)",
    "iptables-save output": "`iptables-save` on the node (`iptables-legacy-save` and `iptables-nft-save` if both)",
    "iptables --version": "`iptables --version` on the node and inside the kube-proxy container",
    "kube-proxy command line": "`ps -ef | grep kube-proxy` on the node",
    "KubeProxyConfiguration": "`kubectl -n kube-system get cm kube-proxy -o yaml`",
    "process list": "`ps -ef` on the node",
    "/proc/locks": "`cat /proc/locks` on the node",
    "/proc/modules": "`cat /proc/modules` on the node",
    "ipvsadm output": "`ipvsadm -Ln` on the node",
    "IPVS connection table": "`ipvsadm -Lnc` on the node (`| grep <Service IP>:<port>` keeps it short)",
    "sysctl output": "`sysctl -a` on the node",
    "conntrack -S output": "`conntrack -S` on the node, twice a few seconds apart",
    "kernel log (dmesg)": "`dmesg -T` on the node",
    "timed name lookups": "`time nslookup kubernetes.default` run a few times in a Pod on the node",
}
