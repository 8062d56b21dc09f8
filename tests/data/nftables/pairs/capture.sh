#!/usr/bin/env bash
# Regenerate the text/JSON pairs from src/: each src/NAME.nft is loaded with `nft -f`, each
# src/NAME.sh is run with bash (iptables-nft commands), inside a throwaway network namespace; then
#   NAME.txt   = `nft list ruleset`, stdout and stderr together as a terminal shows them
#                (stderr carries "# Warning: table ip nat is managed by iptables-nft ...")
#   NAME.json  = `nft -j list ruleset`
# and, for kube_proxy_gen_b only, NAME.handles.txt (`nft -a list ruleset`) and
# NAME.chain.txt / NAME.chain.json (`nft [-j] list chain ip kube-proxy services`).
# usage (root, nftables 1.0.6 / iptables 1.8.9 as on Debian 12):  capture.sh [NAME...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$here"/src/*.nft "$here"/src/*.sh; do b=$(basename "$f"); names+=("${b%.*}"); done
fi
ns=""
cleanup() { if [ -n "$ns" ]; then ip netns del "$ns" 2>/dev/null || true; fi; }
trap cleanup EXIT INT TERM
i=0
for name in "${names[@]}"; do
  i=$((i + 1))
  ns="kpdtxt-$$-$i"
  ip netns add "$ns"
  X=(ip netns exec "$ns")
  if [ -f "$here/src/$name.nft" ]; then "${X[@]}" nft -f "$here/src/$name.nft"; else "${X[@]}" bash "$here/src/$name.sh"; fi
  "${X[@]}" nft list ruleset > "$here/$name.txt" 2>&1
  "${X[@]}" nft -j list ruleset > "$here/$name.json"
  if [ "$name" = kube_proxy_gen_b ]; then
    "${X[@]}" nft -a list ruleset > "$here/$name.handles.txt" 2>&1
    "${X[@]}" nft list chain ip kube-proxy services > "$here/$name.chain.txt" 2>&1
    "${X[@]}" nft -j list chain ip kube-proxy services > "$here/$name.chain.json"
  fi
  ip netns del "$ns"
  ns=""
  echo "captured $name: $(wc -l < "$here/$name.txt") lines"
done
