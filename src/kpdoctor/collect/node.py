"""The node's side of a bundle: rules, counters, settings and kernel state, read-only.

What may run is decided from /proc first, because on a node the wrong read is a write:
``iptables-legacy-save`` of a table that does not exist makes the kernel load and create it,
``ipvsadm``, ``ipset``, ``nft`` and ``conntrack -S`` load their modules, and ``iptables -S``/``-L``
take the xtables lock kube-proxy needs (never used here). So legacy rules are saved table by table
from ``/proc/net/ip_tables_names``, and every other tool runs only when its kernel part is
already there. Counters are read twice, ``interval`` seconds apart, so checks see what grows now.
"""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass, field, replace

from kpdoctor.collect.node_files import node_text, resolve_dir
from kpdoctor.collect.record import Collected, Gathered, NotCollected, Progress
from kpdoctor.collect.runner import Runner
from kpdoctor.parse.links import parse_ip_link
from kpdoctor.parse.sysctl import parse_sysctl
from kpdoctor.parse.system import parse_hostname, parse_ip_addr

Result = Collected | NotCollected

CONNTRACK_ENTRIES_MAX = 200_000  # listing more takes long and yields a huge artifact


@dataclass
class NodeCollection(Gathered):
    hostname: str | None = None
    addresses: list[str] = field(default_factory=list)

    def get(self, path: str) -> Collected | None:
        return next((a for a in self.artifacts if a.path == path), None)


MODULES_LIMIT = 4 * 1024**2  # /proc/modules and modules.builtin: some KB on any real kernel


class Kernel:
    """Which kernel parts are present, without loading any.

    A module counts as present when ``/proc/modules`` lists it, when ``/sys/module/NAME`` exists
    (loaded, or built in with parameters), or when ``modules.builtin`` names it. A kernel without
    ``/proc/modules`` has no loadable modules at all, so nothing can be loaded as a side effect.
    """

    def __init__(self, root: str) -> None:
        self._root = root
        self.modular = os.path.lexists(os.path.join(root, "proc/modules"))
        self.loaded: set[str] = set()
        if self.modular:
            text = node_text(root, "/proc/modules", MODULES_LIMIT) or ""
            self.loaded = {line.split(" ", 1)[0] for line in text.splitlines() if line.strip()}
        text = node_text(root, f"/lib/modules/{os.uname().release}/modules.builtin", MODULES_LIMIT) or ""
        self.builtin = {line.strip().rsplit("/", 1)[-1].removesuffix(".ko") for line in text.splitlines()}

    def present(self, module: str) -> bool:
        if not self.modular:
            return True
        if module in self.loaded or module in self.builtin:
            return True
        return resolve_dir(self._root, f"/sys/module/{module}") is not None


PS_WITH_NETNS = ["ps", "-eww", "-o", "user,pid,ppid,c,stime,tty,time,netns,args"]


def collect_node(
    runner: Runner,
    progress: Progress,
    *,
    interval: float = 5.0,
    second_snapshot: bool = True,
    conntrack_entries: bool = True,
) -> NodeCollection:
    """Everything of the DESIGN.md ``node/`` layout this node has. A caller that compares
    counters across its own readings (the node agent) takes one snapshot (``second_snapshot``
    False: T0 only) and may leave out the conntrack table's entries (large, and costly to read)."""
    host = runner.host
    out = NodeCollection()
    kernel = Kernel(host.root)

    progress("node: counters (first snapshot)")
    t0 = time.monotonic()
    _counters(runner, kernel, "T0", out)

    progress("node: identity")
    hostname = out.add(runner.read("node/hostname", "/proc/sys/kernel/hostname"))
    if isinstance(hostname, Collected):
        out.hostname = parse_hostname(hostname.data.decode("utf-8", "replace"))
    out.add(runner.command("node/uname.txt", ["uname", "-a"], 5))
    osr = runner.read("node/os-release", "/etc/os-release")
    if isinstance(osr, NotCollected):
        osr = runner.read("node/os-release", "/usr/lib/os-release")
    out.add(osr)
    out.add(runner.read("node/modules.txt", "/proc/modules"))
    out.add(_kernel_config(runner))
    out.add(runner.read("node/locks.txt", "/proc/locks"))
    progress("node: processes")
    # with each process's network namespace (a kube-proxy in another one is another node's: kind's
    # nodes on this host); a ps without the column (busybox) gives the plain listing
    listed = runner.command("node/processes.txt", PS_WITH_NETNS, 10)
    if not (isinstance(listed, Collected) and listed.exit_code == 0 and listed.data.strip()):
        listed = runner.command("node/processes.txt", ["ps", "-efww"], 10)
    out.add(listed)

    progress("node: addresses, routes, links")
    addr = out.add(runner.command("node/ip-addr.json", ["ip", "-j", "addr"], 10))
    if isinstance(addr, Collected):
        out.addresses = [str(ip) for ip in parse_ip_addr(addr.data.decode("utf-8", "replace"))]
    out.add(runner.command("node/ip-route.json", ["ip", "-j", "route", "show", "table", "all"], 10))
    links = out.add(runner.command("node/ip-link.json", ["ip", "-j", "-d", "link"], 10))
    if isinstance(links, Collected):
        _vxlan_offloads(runner, links.data.decode("utf-8", "replace"), out)
    _cni_config(runner, out)
    progress("node: sysctl")
    out.add(runner.command("node/sysctl.txt", ["sysctl", "-a"], 15))

    _rules(runner, kernel, progress, out)
    _ipvs(runner, kernel, progress, out, connections=conntrack_entries)

    progress("node: kernel log")
    dmesg = runner.command("node/dmesg.txt", ["dmesg", "-T"], 10)
    if isinstance(dmesg, Collected) and dmesg.exit_code != 0 and not dmesg.data:
        dmesg = runner.command("node/dmesg.txt", ["dmesg"], 10)
    out.add(dmesg)
    if conntrack_entries:
        _conntrack_entries(runner, kernel, progress, out)
    else:
        out.skipped.append(NotCollected("node/conntrack-list.txt", "not asked for"))
    if not second_snapshot:
        return out

    wait = t0 + interval - time.monotonic()
    if wait > 0 and runner.budget.left() > wait + 2:
        progress(f"node: waiting {wait:.0f}s for the second counter snapshot")
        time.sleep(wait)
    progress("node: counters (second snapshot)")
    if runner.budget.left() > 1:
        _counters(runner, kernel, "T1", out)
    else:
        out.skipped.append(NotCollected("node/counters/T1", "the collection's time bound was reached"))
    return out


def _counters(runner: Runner, kernel: Kernel, snap: str, out: NodeCollection) -> None:
    host = runner.host
    base = f"node/counters/{snap}"
    out.add(runner.read(f"{base}/nf_conntrack-stat.txt", host.net_proc("net/stat/nf_conntrack")))
    # the neighbour tables' counters (one table for every namespace, shown in the node's own)
    for table in ("arp_cache", "ndisc_cache"):
        out.add(runner.read(f"{base}/{table}-stat.txt", host.net_proc(f"net/stat/{table}")))
    out.add(runner.read(f"{base}/softnet_stat.txt", host.net_proc("net/softnet_stat")))
    if kernel.present("nf_conntrack_netlink"):
        out.add(runner.command(f"{base}/conntrack-stats.txt", ["conntrack", "-S"], 5))
    else:
        out.add(NotCollected(f"{base}/conntrack-stats.txt", "nf_conntrack_netlink is not loaded: read /proc instead"))
    out.add(runner.command(f"{base}/netstat-s.txt", ["netstat", "-s"], 10))
    # -a: absolute values, -s: do not write nstat's history file, -z: zeros too
    out.add(runner.command(f"{base}/nstat.txt", ["nstat", "-asz"], 10))
    out.add(runner.command(f"{base}/ss-ltnp.txt", ["ss", "-ltnp"], 10))


def _rules(runner: Runner, kernel: Kernel, progress: Progress, out: NodeCollection) -> None:
    host = runner.host
    progress("node: iptables version")
    version = out.add(runner.command("node/iptables-version.txt", ["iptables", "--version"], 5))
    mode = version.data.decode("utf-8", "replace") if isinstance(version, Collected) else ""
    # iptables < 1.8 has no -legacy/-nft names: its plain iptables-save is legacy.
    plain_is_nft = "nf_tables" in mode
    for tool, module in (("iptables", "ip_tables"), ("ip6tables", "ip6_tables")):
        names_file = f"net/{module}_names"
        legacy_path, nft_path = f"node/{tool}-legacy-save.txt", f"node/{tool}-nft-save.txt"
        progress(f"node: {tool}-legacy-save")
        save = f"{tool}-legacy-save" if host.which(f"{tool}-legacy-save") else None
        if save is None and not plain_is_nft and host.which(f"{tool}-save"):
            save = f"{tool}-save"
        tables = _read_names(host.root, host.net_proc(names_file))
        if tables is None:
            out.add(_empty(legacy_path, f"/proc/{names_file} is absent ({module} not loaded): no legacy rules"))
        elif save is None:
            out.add(NotCollected(legacy_path, f"{tool}-legacy-save is not installed on the node"))
        else:
            parts = [runner.command(legacy_path, [save, "-t", t], 20) for t in tables]
            out.add(_join(legacy_path, parts, f"/proc/{names_file} lists no table: no legacy rules"))
        progress(f"node: {tool}-nft-save")
        nft = f"{tool}-nft-save" if host.which(f"{tool}-nft-save") else None
        if nft is None and plain_is_nft and host.which(f"{tool}-save"):
            nft = f"{tool}-save"
        if not kernel.present("nf_tables"):
            out.add(_empty(nft_path, "nf_tables is not loaded: no nf_tables rules"))
        elif nft is None:
            out.add(NotCollected(nft_path, f"{tool}-nft-save is not installed on the node"))
        else:
            out.add(runner.command(nft_path, [nft], 30))
    if kernel.present("nf_tables"):
        _nft_ruleset(runner, progress, out)
    else:
        out.add(NotCollected("node/nft-ruleset.json", "nf_tables is not loaded"))
    if kernel.present("ip_set"):
        progress("node: ipset save")
        out.add(runner.command("node/ipset-save.txt", ["ipset", "save"], 20))
    else:
        out.add(NotCollected("node/ipset-save.txt", "ip_set is not loaded"))


def _nft_ruleset(runner: Runner, progress: Progress, out: NodeCollection) -> None:
    """``nft -j list ruleset``, and the text listing when that fails: some nft builds have no
    JSON support, and an older nft can crash listing sets a newer one wrote (the version, exit
    code and stderr of each attempt are in the manifest)."""
    progress("node: nft list ruleset")
    version = runner.command("node/nft-version.txt", ["nft", "--version"], 5)
    out.add(version)
    if isinstance(version, NotCollected):
        return
    listing = runner.command("node/nft-ruleset.json", ["nft", "-j", "list", "ruleset"], 30)
    out.add(listing)
    if isinstance(listing, Collected) and listing.exit_code == 0 and listing.data.lstrip().startswith(b"{"):
        return
    progress("node: nft list ruleset (text)")
    out.add(runner.command("node/nft-ruleset.txt", ["nft", "list", "ruleset"], 30))


def _ipvs(runner: Runner, kernel: Kernel, progress: Progress, out: NodeCollection, *, connections: bool) -> None:
    if not os.path.exists(runner.host.path(runner.host.net_proc("net/ip_vs"))) or not kernel.present("ip_vs"):
        out.add(NotCollected("node/ipvsadm-*.txt", "ip_vs is not loaded (no /proc/net/ip_vs): IPVS is not in use"))
        return
    progress("node: ipvsadm")
    out.add(runner.command("node/ipvsadm-list.txt", ["ipvsadm", "-Ln"], 20))
    out.add(runner.command("node/ipvsadm-save.txt", ["ipvsadm", "-Sn"], 20))
    out.add(runner.command("node/ipvsadm-timeout.txt", ["ipvsadm", "-Ln", "--timeout"], 10))
    if connections:  # what `ipvsadm -Lnc` reads: which real server each client ip:port is held to
        out.add(runner.read("node/ip_vs_conn.txt", runner.host.net_proc("net/ip_vs_conn"), limit=IPVS_CONN_MAX))
    else:
        out.skipped.append(NotCollected("node/ip_vs_conn.txt", "not asked for"))


# The kernel's build configuration: /proc/config.gz is some 30-60 KB (its text 100-300 KB)
KERNEL_CONFIG_MAX = 1024**2
KERNEL_CONFIG_TEXT_MAX = 4 * 1024**2


def _kernel_config(runner: Runner) -> Collected | NotCollected:
    """The running kernel's build configuration: ``/proc/config.gz`` (a kernel built with
    IKCONFIG_PROC), else ``/boot/config-RELEASE``. A part whose option is built neither in nor as a
    module cannot be loaded by anything (KP116, KP113). The gzip is read bounded, and unpacked
    bounded: a file that is not gzip, or unpacks past the bound, is said so, not read."""
    path = "node/kernel-config.txt"
    got = runner.read(path, "/proc/config.gz", limit=KERNEL_CONFIG_MAX)
    if isinstance(got, Collected):
        unpack = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            text = unpack.decompress(got.data, KERNEL_CONFIG_TEXT_MAX)
        except zlib.error as exc:
            return NotCollected(path, f"/proc/config.gz does not unpack: {exc}")
        if unpack.unconsumed_tail:
            return NotCollected(path, f"/proc/config.gz unpacks past {KERNEL_CONFIG_TEXT_MAX} bytes: not read")
        return replace(got, data=text, source="read /proc/config.gz (unpacked)")
    return runner.read(path, f"/boot/config-{os.uname().release}", limit=KERNEL_CONFIG_TEXT_MAX)


# IPVS's connection table read at most (about 100 bytes a connection: the first 600,000 or so)
IPVS_CONN_MAX = 64 * 1024**2

# where the container runtime reads its CNI network configuration (k3s keeps its own)
CNI_DIRS = ("/etc/cni/net.d", "/var/lib/rancher/k3s/agent/etc/cni/net.d")
CNI_SUFFIXES = (".conflist", ".conf", ".json")


def _cni_config(runner: Runner, out: NodeCollection) -> None:
    """The CNI network configuration in use: the first file by name in the runtime's directory
    (as libcni picks it), which decides a bridge CNI's hairpin mode."""
    for d in CNI_DIRS:
        found = resolve_dir(runner.host.root, d)
        if found is None:
            continue
        try:
            names = sorted(n for n in os.listdir(found) if n.endswith(CNI_SUFFIXES))
        except OSError:
            continue
        if names:
            out.add(runner.read("node/cni-config.json", f"{d}/{names[0]}", limit=1024 * 1024))
            return
    out.skipped.append(NotCollected("node/cni-config.json", f"no CNI configuration in {' or '.join(CNI_DIRS)}"))


def _vxlan_offloads(runner: Runner, links: str, out: NodeCollection) -> None:
    """``ethtool -k`` of the node's first VXLAN device (flannel.1, vxlan.calico): whether its
    checksum offload is on decides whether NATed VXLAN packets leave with a wrong checksum."""
    vxlan = next((ln.name for ln in parse_ip_link(links) if ln.kind == "vxlan"), None)
    if vxlan is None:
        out.skipped.append(NotCollected("node/ethtool-k-vxlan.txt", "no VXLAN device on the node"))
        return
    out.add(runner.command("node/ethtool-k-vxlan.txt", ["ethtool", "-k", vxlan], 5))


def _conntrack_entries(runner: Runner, kernel: Kernel, progress: Progress, out: NodeCollection) -> None:
    path = "node/conntrack-list.txt"
    sysctl = out.get("node/sysctl.txt")
    count = None
    if sysctl is not None:
        setting = parse_sysctl(sysctl.data.decode("utf-8", "replace")).get("net.netfilter.nf_conntrack_count")
        count = int(setting.value) if setting is not None and setting.value.isdigit() else None
    if count is not None and count > CONNTRACK_ENTRIES_MAX:
        out.add(NotCollected(path, f"{count} connections tracked: too many to list"))
        return
    progress("node: conntrack entries")
    proc = runner.host.net_proc("net/nf_conntrack")
    if os.path.lexists(runner.host.path(proc)):
        out.add(runner.read(path, proc, limit=256 * 1024**2))
    elif kernel.present("nf_conntrack_netlink"):
        out.add(runner.command(path, ["conntrack", "-L"], 20))
    else:
        out.add(NotCollected(path, "no /proc/net/nf_conntrack and nf_conntrack_netlink is not loaded"))


def _read_names(root: str, inside: str) -> list[str] | None:
    text = node_text(root, inside, 64 * 1024)
    return None if text is None else [line.strip() for line in text.splitlines() if line.strip()]


def _empty(path: str, why: str) -> Collected:
    """An artifact known to be empty: evidence (no rules of that kind), not a gap."""
    return Collected(path, b"", f"none: {why}", 0, "", "", 0, why)


def _join(path: str, parts: list[Result], none_why: str) -> Result:
    """One artifact from several runs (one per legacy table), in the order run."""
    done = [p for p in parts if isinstance(p, Collected)]
    if not parts:
        return _empty(path, none_why)
    if not done:
        return parts[0]
    codes = [p.exit_code for p in done]
    code = None if None in codes else max(c for c in codes if c is not None)
    return Collected(
        path,
        b"".join(p.data for p in done),
        "; ".join(p.source for p in done),
        code,
        "".join(p.stderr for p in done),
        done[0].started_at,
        sum(p.duration_ms for p in done),
        "; ".join(p.note for p in done if p.note),
        done[0].binary,
        done[0].binary_version,
    )
