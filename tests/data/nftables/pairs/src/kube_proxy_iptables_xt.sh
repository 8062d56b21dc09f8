# kube-proxy iptables mode (and other xtables users) written with iptables-nft / ip6tables-nft
set -e
I=iptables-nft
$I -t nat -A POSTROUTING -s 10.0.3.0/24 -o eth0 -m policy --dir out --pol ipsec -j ACCEPT
$I -t nat -A POSTROUTING -s 10.0.3.0/24 -o eth0 -j MASQUERADE
$I -t nat -N KUBE-SERVICES
$I -t nat -N KUBE-SVC-X
$I -t nat -N KUBE-SEP-A
$I -t nat -N KUBE-MARK-MASQ
$I -t nat -N KUBE-POSTROUTING
$I -t nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
$I -t nat -A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp --dport 80 -j KUBE-SVC-X
$I -t nat -A KUBE-SVC-X -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-A
$I -t nat -A KUBE-SEP-A -s 10.180.0.1/32 -m comment --comment "ns1/svc1:p80" -j KUBE-MARK-MASQ
$I -t nat -A KUBE-SEP-A -p tcp -m comment --comment "ns1/svc1:p80" -m tcp --dport 1:65535 -j DNAT --to-destination 10.180.0.1:80
$I -t nat -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
$I -t nat -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
$I -t nat -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
$I -t nat -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
$I -t nat -A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-SVC-X
$I -t nat -A KUBE-SERVICES -m statistic --mode nth --every 2 --packet 0 -j KUBE-SVC-X
$I -t filter -N KUBE-FIREWALL
$I -t filter -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
$I -t filter -A KUBE-FIREWALL -m conntrack --ctstate INVALID -j DROP
$I -t filter -A KUBE-FIREWALL -p tcp -m tcp --tcp-flags SYN,ACK SYN -j REJECT --reject-with tcp-reset
$I -t filter -A KUBE-FIREWALL -m set --match-set foo src -j DROP 2>/dev/null || true
$I -t filter -A KUBE-FIREWALL -m physdev --physdev-is-in -j ACCEPT || true
$I -t filter -A KUBE-FIREWALL -m owner --uid-owner 0 -j ACCEPT || true
$I -t filter -A KUBE-FIREWALL -m mac --mac-source 00:11:22:33:44:55 -j ACCEPT || true
$I -t filter -A KUBE-FIREWALL -m iprange --src-range 10.0.0.1-10.0.0.9 -j ACCEPT || true
$I -t filter -A KUBE-FIREWALL -m tcp -p tcp --sport 1000:2000 -j ACCEPT
$I -t filter -A KUBE-FIREWALL -p udp -m udp --dport 53 -j ACCEPT
$I -t filter -A KUBE-FIREWALL -m pkttype --pkt-type multicast -j ACCEPT || true
$I -t filter -A KUBE-FIREWALL -m limit --limit 10/sec --limit-burst 20 -j ACCEPT
$I -t filter -A KUBE-FIREWALL -j LOG --log-prefix "x " --log-level 4
$I -t filter -A KUBE-FIREWALL -j NFLOG --nflog-group 2 || true
$I -t filter -A KUBE-FIREWALL -p tcp -j REJECT
$I -t filter -A KUBE-FIREWALL -i lo -j ACCEPT
$I -t filter -A KUBE-FIREWALL -g KUBE-FIREWALL2 2>/dev/null || { $I -N KUBE-FIREWALL2; $I -A KUBE-FIREWALL -g KUBE-FIREWALL2; }
$I -t raw -A PREROUTING -p udp --dport 53 -j CT --notrack
$I -t raw -A PREROUTING -p udp --dport 54 -j NOTRACK || true
$I -t mangle -A PREROUTING -j CONNMARK --save-mark
$I -t mangle -A PREROUTING -j TPROXY --on-port 1234 --on-ip 1.2.3.4 -p tcp || true
$I -t mangle -A PREROUTING -j MARK --and-mark 0xff
$I -t nat -A POSTROUTING -p tcp -j SNAT --to-source 1.2.3.4:1000-2000
$I -t nat -A PREROUTING -p tcp -j REDIRECT --to-ports 8080
$I -t nat -A KUBE-SEP-A -p tcp -j DNAT --to-destination 1.2.3.4
ip6tables-nft -A INPUT -j REJECT
ip6tables-nft -A INPUT -s fd00::/64 -p tcp --dport 22 -j ACCEPT
ip6tables-nft -t nat -A PREROUTING -p tcp -j DNAT --to-destination [fd00::1]:80
