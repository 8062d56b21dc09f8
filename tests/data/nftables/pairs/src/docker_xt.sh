# docker-like ip nat / ip filter tables written with iptables-nft (xtables matches and targets)
set -e
I=iptables-nft
$I -t nat -N DOCKER
$I -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
$I -t nat -A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
$I -t nat -A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
$I -t nat -A DOCKER -i docker0 -j RETURN
$I -t nat -A DOCKER ! -i docker0 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 172.17.0.2:80
$I -t nat -A DOCKER -p tcp -m statistic --mode random --probability 0.5 -m comment --comment "ns/svc" -j DNAT --to-destination 10.0.0.1:80
$I -t nat -A DOCKER -p udp --dport 53 -j DNAT --to-destination 10.0.0.2
$I -N DOCKER-USER
$I -A FORWARD -j DOCKER-USER
$I -A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
$I -A FORWARD -m conntrack --ctstate NEW -j ACCEPT
$I -A FORWARD -m state --state INVALID -j DROP
$I -A DOCKER-USER -j RETURN
$I -A INPUT -p tcp -m multiport --dports 22,80 -j ACCEPT
$I -A INPUT -p icmp --icmp-type echo-request -j ACCEPT
$I -A INPUT -m mark --mark 0x4000/0x4000 -j ACCEPT
$I -A INPUT -j REJECT --reject-with icmp-host-prohibited
$I -A INPUT -m limit --limit 5/min -j LOG --log-prefix "dropped: "
$I -A OUTPUT -j MARK --set-xmark 0x4000/0x4000
$I -A OUTPUT -j MARK --set-mark 0x1
$I -t mangle -A PREROUTING -j CONNMARK --restore-mark
