#!/usr/bin/env bash
# Regenerate the real captures of two HEALTHY nodes that are not in iptables mode:
#
#   ipvs-healthy/      kube-proxy v1.28 in IPVS mode (kubelet 1.28, iptables-legacy backend)
#     iptables-save.txt   real `iptables-legacy-save`
#     ipset-list.txt      real `ipset list`
#     ip-addr.txt         real `ip addr`
#   nftables-healthy/  kube-proxy v1.31 in nftables mode (kubelet 1.31, iptables-nft backend)
#     iptables-save.txt   real `iptables-nft-save` (kubelet's chains only)
#     ruleset.txt, ruleset.json, cluster.json, kube-proxy.yaml
#                         copied from ../upstream/nftables/TestOverallNFTablesRules.*
#
# Everything is built inside throw-away network namespaces (prefix kpdmodes-<pid>), with the
# exact commands kubelet and kube-proxy run (see SOURCES.md for the upstream source of every
# rule text). No packet is sent anywhere. Every namespace is deleted on exit.
# The hand-written files (cluster.json, kube-proxy.yaml, kube-proxy.log, ipvsadm.txt of the
# IPVS node; kube-proxy.log of the nftables node) are not generated: when OUT_DIR is not this
# folder they are copied there so that OUT_DIR holds a complete set.
#
# usage: realize.sh [OUT_DIR]     (default: the folder of this script; needs root, Debian's
#                                  iptables 1.8.9 (legacy + nft), ipset, iproute2)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here}
upstream=$here/../upstream/nftables/TestOverallNFTablesRules

[ "$(id -u)" -eq 0 ] || { echo "realize.sh: needs root (network namespaces)" >&2; exit 1; }
for tool in ip unshare nsenter ipset iptables-legacy iptables-legacy-restore iptables-legacy-save ip6tables-legacy ip6tables-legacy-restore iptables-nft iptables-nft-save; do
  command -v "$tool" >/dev/null || { echo "realize.sh: $tool not found" >&2; exit 1; }
done

prefix=kpdmodes-$$
lanpid=
cleanup() {
  local ns
  for ns in "$prefix-ipvs" "$prefix-nft"; do
    ip netns del "$ns" 2>/dev/null || true
  done
  # the unnamed namespace at the far end of eth0 lives as long as its one process
  if [ -n "$lanpid" ]; then kill "$lanpid" 2>/dev/null || true; wait "$lanpid" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$out/ipvs-healthy" "$out/nftables-healthy"

########################################################################################
# Node A: ipvs-node, kube-proxy v1.28 IPVS mode
########################################################################################
nsA=$prefix-ipvs
ip netns add "$nsA"
A() { ip netns exec "$nsA" "$@"; }

# --- the node's own interfaces: lo, and eth0 with the InternalIP ---
# This kernel has no dummy driver (CONFIG_DUMMY unset), so eth0 is a veth whose far end sits
# in an unnamed throw-away namespace (as on a kind node: "eth0@ifN ... link-netnsid 0").
# DAD is switched off on eth0 so that its link-local address is not caught "tentative".
A ip link set lo up
A ip link add eth0 type veth peer name lan0
unshare --net sleep 600 &
lanpid=$!
sleep 0.2
A ip link set lan0 netns "$lanpid"
nsenter -t "$lanpid" -n ip link set lan0 up
A sysctl -q -w net.ipv6.conf.eth0.accept_dad=0
A ip addr add 192.168.0.2/24 brd + dev eth0
A ip link set eth0 up

# --- kubelet (pkg/kubelet/kubelet_network_linux.go, syncIPTablesRules + iptClient.Monitor) ---
ipt() { A iptables-legacy -w 5 "$@"; }
ipt -t mangle -N KUBE-IPTABLES-HINT
ipt -t filter -N KUBE-FIREWALL
ipt -t filter -I OUTPUT -j KUBE-FIREWALL
ipt -t filter -I INPUT -j KUBE-FIREWALL
ipt -t filter -A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" \
  --dst 127.0.0.0/8 ! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
for t in mangle nat filter; do ipt -t "$t" -N KUBE-KUBELET-CANARY; done

# --- kube-proxy IPVS proxier, createAndLinkKubeChain(): EnsureChain for iptablesChains ... ---
for c in KUBE-SERVICES KUBE-POSTROUTING KUBE-NODE-PORT KUBE-LOAD-BALANCER KUBE-MARK-MASQ; do
  ipt -t nat -N "$c"
done
for c in KUBE-FORWARD KUBE-NODE-PORT KUBE-PROXY-FIREWALL KUBE-SOURCE-RANGES-FIREWALL KUBE-IPVS-FILTER; do
  ipt -t filter -N "$c"
done
# ... and EnsureRule(Prepend, ...) for iptablesJumpChain, in its order (v1.28: no KUBE-IPVS-OUT-FILTER)
jump() { ipt -t "$1" -I "$2" -m comment --comment "$3" -j "$4"; }
jump nat OUTPUT "kubernetes service portals" KUBE-SERVICES
jump nat PREROUTING "kubernetes service portals" KUBE-SERVICES
jump nat POSTROUTING "kubernetes postrouting rules" KUBE-POSTROUTING
jump filter FORWARD "kubernetes forwarding rules" KUBE-FORWARD
jump filter INPUT "kubernetes health check rules" KUBE-NODE-PORT
jump filter INPUT "kube-proxy firewall rules" KUBE-PROXY-FIREWALL
jump filter FORWARD "kube-proxy firewall rules" KUBE-PROXY-FIREWALL
jump filter INPUT "kubernetes ipvs access filter" KUBE-IPVS-FILTER

# --- EnsureDummyDevice(kube-ipvs0): created, never set up (state DOWN on real nodes) ---
# No dummy driver in this kernel: an ifb device with txqueuelen 0 shows exactly what a
# netlink-created dummy shows in `ip addr` (<BROADCAST,NOARP> ... qdisc noop state DOWN, no qlen).
A ip link add kube-ipvs0 type ifb
A ip link set kube-ipvs0 txqueuelen 0

# --- ensureIPSet() for every set of ipsetInfo, as pkg/proxy/ipvs/ipset createSet() runs it ---
# (dual-stack node: the IPv6 proxier makes the same sets as KUBE-6-*, names cut to 31 chars)
hashargs() { echo "family $1 hashsize 1024 maxelem 65536"; }
mkset() { # name type family
  local name=$1 type=$2 fam=$3
  if [ "$fam" = inet6 ]; then
    name=${name/KUBE-/KUBE-6-}; name=${name:0:31}
  fi
  case $type in
    bitmap:port) A ipset create "$name" bitmap:port range 0-65535 -exist ;;
    *) # shellcheck disable=SC2046
       A ipset create "$name" "$type" $(hashargs "$fam") -exist ;;
  esac
}
for fam in inet inet6; do
  mkset KUBE-LOOP-BACK                 hash:ip,port,ip  "$fam"
  mkset KUBE-CLUSTER-IP                hash:ip,port     "$fam"
  mkset KUBE-EXTERNAL-IP               hash:ip,port     "$fam"
  mkset KUBE-EXTERNAL-IP-LOCAL         hash:ip,port     "$fam"
  mkset KUBE-LOAD-BALANCER             hash:ip,port     "$fam"
  mkset KUBE-LOAD-BALANCER-FW          hash:ip,port     "$fam"
  mkset KUBE-LOAD-BALANCER-LOCAL       hash:ip,port     "$fam"
  mkset KUBE-LOAD-BALANCER-SOURCE-IP   hash:ip,port,ip  "$fam"
  mkset KUBE-LOAD-BALANCER-SOURCE-CIDR hash:ip,port,net "$fam"
  mkset KUBE-NODE-PORT-TCP             bitmap:port      "$fam"
  mkset KUBE-NODE-PORT-LOCAL-TCP       bitmap:port      "$fam"
  mkset KUBE-NODE-PORT-UDP             bitmap:port      "$fam"
  mkset KUBE-NODE-PORT-LOCAL-UDP       bitmap:port      "$fam"
  mkset KUBE-NODE-PORT-SCTP-HASH       hash:ip,port     "$fam"
  mkset KUBE-NODE-PORT-LOCAL-SCTP-HASH hash:ip,port     "$fam"
  mkset KUBE-HEALTH-CHECK-NODE-PORT    bitmap:port      "$fam"
  mkset KUBE-IPVS-IPS                  hash:ip          "$fam"
done

# --- syncService(bindAddr=true): every ClusterIP bound to kube-ipvs0 as /32 ---
for vip in 10.96.0.1 10.96.0.10 10.96.100.20; do
  A ip addr add "$vip/32" dev kube-ipvs0
done

# --- syncIPSetEntries(): the entries syncProxyRules computes for ipvs-healthy/cluster.json ---
# ClusterIP:port of every Service port
for e in 10.96.0.1,tcp:443 10.96.0.10,udp:53 10.96.0.10,tcp:53 10.96.0.10,tcp:9153 10.96.100.20,tcp:80; do
  A ipset add KUBE-CLUSTER-IP "$e" -exist
done
# endpoints on this node (nodeName ipvs-node): ip,proto:port,ip  (hairpin SNAT)
for e in 10.244.0.5,udp:53,10.244.0.5 10.244.0.5,tcp:53,10.244.0.5 10.244.0.5,tcp:9153,10.244.0.5 \
         10.244.0.9,tcp:8080,10.244.0.9; do
  A ipset add KUBE-LOOP-BACK "$e" -exist
done
# NodePort default/web:http (TCP, externalTrafficPolicy Cluster)
A ipset add KUBE-NODE-PORT-TCP 30080 -exist
# addresses bound to kube-ipvs0
for vip in 10.96.0.1 10.96.0.10 10.96.100.20; do A ipset add KUBE-IPVS-IPS "$vip" -exist; done

# --- writeIptablesRules() for these sets, restored the way kube-proxy restores it ---
# (RestoreAll(..., NoFlushTables, RestoreCounters): nat chains+rules, then filter chains+rules;
#  masqueradeMark = fmt.Sprintf("%#08x", 1<<14) = 0x004000; LocalTrafficDetector = ClusterCIDR)
A iptables-legacy-restore -w 5 --noflush --counters <<'EOF'
*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-POSTROUTING -m mark ! --mark 0x004000/0x004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000
COMMIT
*filter
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x004000/0x004000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT
COMMIT
EOF

# --- the IPv6 half of the dual-stack proxier (and kubelet's IPv6 client) ---
# Not captured as a file; it is done so that the KUBE-6-* sets carry the real "References"
# counts the IPv6 rules give them. No IPv6 Service exists, so only the fixed rules are written
# (loAddr ::1/128; LocalTrafficDetector no-op: there is no IPv6 clusterCIDR).
ip6t() { A ip6tables-legacy -w 5 "$@"; }
ip6t -t mangle -N KUBE-IPTABLES-HINT
for t in mangle nat filter; do ip6t -t "$t" -N KUBE-KUBELET-CANARY; done
for c in KUBE-SERVICES KUBE-POSTROUTING KUBE-NODE-PORT KUBE-LOAD-BALANCER KUBE-MARK-MASQ; do
  ip6t -t nat -N "$c"
done
for c in KUBE-FORWARD KUBE-NODE-PORT KUBE-PROXY-FIREWALL KUBE-SOURCE-RANGES-FIREWALL KUBE-IPVS-FILTER; do
  ip6t -t filter -N "$c"
done
jump6() { ip6t -t "$1" -I "$2" -m comment --comment "$3" -j "$4"; }
jump6 nat OUTPUT "kubernetes service portals" KUBE-SERVICES
jump6 nat PREROUTING "kubernetes service portals" KUBE-SERVICES
jump6 nat POSTROUTING "kubernetes postrouting rules" KUBE-POSTROUTING
jump6 filter FORWARD "kubernetes forwarding rules" KUBE-FORWARD
jump6 filter INPUT "kubernetes health check rules" KUBE-NODE-PORT
jump6 filter INPUT "kube-proxy firewall rules" KUBE-PROXY-FIREWALL
jump6 filter FORWARD "kube-proxy firewall rules" KUBE-PROXY-FIREWALL
jump6 filter INPUT "kubernetes ipvs access filter" KUBE-IPVS-FILTER
A ip6tables-legacy-restore -w 5 --noflush --counters <<'EOF6'
*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A KUBE-SERVICES -s ::1/128 -j RETURN
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-POSTROUTING -m mark ! --mark 0x004000/0x004000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x004000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000
COMMIT
*filter
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x004000/0x004000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-NODE-PORT -m comment --comment "Kubernetes health check node port" -m set --match-set KUBE-6-HEALTH-CHECK-NODE-PORT dst -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-CLUSTER-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-EXTERNAL-IP dst,dst -j RETURN
-A KUBE-IPVS-FILTER -m set --match-set KUBE-6-HEALTH-CHECK-NODE-PORT dst -j RETURN
-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-6-IPVS-IPS dst -j REJECT
COMMIT
EOF6

A iptables-legacy-save >"$out/ipvs-healthy/iptables-save.txt"
A ipset list >"$out/ipvs-healthy/ipset-list.txt"
A ip addr >"$out/ipvs-healthy/ip-addr.txt"
ip netns del "$nsA"
kill "$lanpid"; wait "$lanpid" 2>/dev/null || true; lanpid=

# sanity: IPVS mode writes no per-Service chains and no DNAT
if grep -Eq 'KUBE-(SVC|SEP|EXT|FW|SVL)-|-j DNAT' "$out/ipvs-healthy/iptables-save.txt"; then
  echo "realize.sh: unexpected iptables-mode rules in ipvs-healthy/iptables-save.txt" >&2; exit 1
fi

########################################################################################
# Node B: test-node, kube-proxy v1.31 nftables mode: only kubelet's chains in iptables
########################################################################################
nsB=$prefix-nft
ip netns add "$nsB"
B() { ip netns exec "$nsB" "$@"; }
iptn() { B iptables-nft -w 5 "$@"; }
iptn -t mangle -N KUBE-IPTABLES-HINT
iptn -t filter -N KUBE-FIREWALL
iptn -t filter -I OUTPUT -j KUBE-FIREWALL
iptn -t filter -I INPUT -j KUBE-FIREWALL
iptn -t filter -A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" \
  --dst 127.0.0.0/8 ! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
for t in mangle nat filter; do iptn -t "$t" -N KUBE-KUBELET-CANARY; done
B iptables-nft-save >"$out/nftables-healthy/iptables-save.txt"
ip netns del "$nsB"

if grep -Eq 'KUBE-(SERVICES|SVC|SEP|NODEPORTS|POSTROUTING|MARK-MASQ|PROXY)' "$out/nftables-healthy/iptables-save.txt"; then
  echo "realize.sh: kube-proxy chains in nftables-healthy/iptables-save.txt" >&2; exit 1
fi

# --- the upstream nftables fixture (real `nft list ruleset` of kube-proxy's own test expectation)
cp "$upstream.ruleset.txt"     "$out/nftables-healthy/ruleset.txt"
cp "$upstream.ruleset.json"    "$out/nftables-healthy/ruleset.json"
cp "$upstream.cluster.json"    "$out/nftables-healthy/cluster.json"
cp "$upstream.kube-proxy.yaml" "$out/nftables-healthy/kube-proxy.yaml"

# --- hand-written files: copy them along when writing somewhere else ---
if [ "$(cd "$out" && pwd)" != "$here" ]; then
  for f in ipvs-healthy/cluster.json ipvs-healthy/kube-proxy.yaml ipvs-healthy/kube-proxy.log \
           ipvs-healthy/ipvsadm.txt nftables-healthy/kube-proxy.log SOURCES.md; do
    [ -f "$here/$f" ] && cp "$here/$f" "$out/$f"
  done
fi

echo "ok: $out/ipvs-healthy ($(grep -c '^-A' "$out/ipvs-healthy/iptables-save.txt") iptables rules," \
     "$(grep -c '^Name:' "$out/ipvs-healthy/ipset-list.txt") ipsets)," \
     "$out/nftables-healthy ($(grep -c '^-A' "$out/nftables-healthy/iptables-save.txt") iptables rules)"
