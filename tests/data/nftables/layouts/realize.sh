#!/usr/bin/env bash
# Regenerate ruleset.txt / ruleset.json for every layout fixture in this directory.
#
# For each <layout>/rules.nft: load it with `nft -f` into a fresh, empty network namespace
# named kpdlay-<pid>-<N>, then keep what the kernel hands back:
#   <layout>/ruleset.txt   = `nft list ruleset`
#   <layout>/ruleset.json  = `nft -j list ruleset`
# The namespace is deleted right after, and on any exit (trap). No traffic is sent, no
# interface is created, nothing outside the namespaces is touched (the kernel may autoload
# nf_tables modules, as any nft use does).
#
# usage (root): realize.sh [LAYOUTS_DIR]        (default: the directory of this script)
# needs: iproute2 (`ip netns`), nftables. The committed outputs were made with nft 1.0.6
# (Debian 12); other nft versions print slightly differently, so the script warns.
set -euo pipefail

dir=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
[[ $(id -u) == 0 ]] || { echo "realize.sh: must run as root" >&2; exit 1; }
command -v nft >/dev/null || { echo "realize.sh: nft not found" >&2; exit 1; }

ver=$(nft --version)
[[ $ver == *"v1.0.6 "* ]] || echo "realize.sh: warning: $ver (fixtures were realized with nftables v1.0.6)" >&2

created=()
cleanup() {
  local ns
  for ns in "${created[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

n=0 failed=0
for rules in "$dir"/*/rules.nft; do
  [[ -e $rules ]] || continue
  layout=$(basename "$(dirname "$rules")")
  out=$(dirname "$rules")
  n=$((n + 1))
  ns="kpdlay-$$-$n"
  ip netns add "$ns"
  created+=("$ns")
  if err=$(ip netns exec "$ns" nft -f "$rules" 2>&1); then
    ip netns exec "$ns" nft list ruleset > "$out/ruleset.txt"
    ip netns exec "$ns" nft -j list ruleset > "$out/ruleset.json"
    echo "ok   $layout: $(grep -c '^[[:space:]]*chain ' "$out/ruleset.txt") chains"
  else
    failed=$((failed + 1))
    echo "FAIL $layout: nft -f rules.nft failed (outputs left unchanged):" >&2
    printf '%s\n' "$err" | head -20 >&2
  fi
  ip netns del "$ns"
  unset 'created[-1]'
done

[[ $n -gt 0 ]] || { echo "realize.sh: no */rules.nft under $dir" >&2; exit 1; }
exit $((failed > 0))
