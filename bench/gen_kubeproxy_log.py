"""Write a synthetic kube-proxy log: mostly ``--v=4`` noise of both klog eras, sparse errors.

Deterministic (seeded) and streamed in large joined blocks, so 1 GB takes seconds and memory
stays flat. The error records reuse the exact text of the symptoms quoted in the check modules'
docstrings and in the field reports under /work/shared/seeds (multi-line ``err=<`` blocks and a
panic with its stack included).

``--failure-every N`` writes the log of a kube-proxy that has been failing for days: one record
in N is a failure (restore failures with ``err=<`` blocks and their "Sync failed", glog-era
restore errors, xtables lock timeouts, node lookups), on top of the sparse errors. The cost of a
scan must not grow with that density (D10).

Usage: python bench/gen_kubeproxy_log.py [OUT.log] [--size-mb 1024] [--seed 4] [--failure-every N]
(OUT defaults to bench/out/kube-proxy-<N>mb.log, or kube-proxy-<N>mb-dense<K>.log; bench/out/ is
git-ignored.)
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Start-up of a kube-proxy (structured era): flags, version, mode, node IP. Written once, first.
STARTUP = [
    'I1113 16:00:01.{u:06d}       1 flags.go:64] FLAG: --bind-address="0.0.0.0"\n',
    'I1113 16:00:01.{u:06d}       1 flags.go:64] FLAG: --config="/var/lib/kube-proxy/config.conf"\n',
    'I1113 16:00:01.{u:06d}       1 flags.go:64] FLAG: --hostname-override="ip-10-188-166-140.ec2.internal"\n',
    'I1113 16:00:01.{u:06d}       1 flags.go:64] FLAG: --v="4"\n',
    'I1113 16:00:01.{u:06d}       1 server.go:846] "Version info" version="v1.28.3"\n',
    'I1113 16:00:01.{u:06d}       1 node.go:141] "Successfully retrieved node IP(s)" IPs=["10.188.166.140"]\n',
    'I1113 16:00:01.{u:06d}       1 server_others.go:152] "Using iptables Proxier"\n',
    'I1113 16:00:01.{u:06d}       1 server_others.go:178] "kube-proxy running in single-stack mode: secondary ipFamily is not supported" ipFamily="IPv6"\n',
]

# --v=4 noise. Structured (1.20+) and glog-era (<= 1.19) lines.
NOISE = [
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1464] "Reloading service iptables data" numServices={n} numEndpoints={e} numFilterChains=4 numFilterRules=7 numNATChains={c} numNATRules={r}\n',
    "I1113 16:{m:02d}:{s:02d}.{u:06d}       1 round_trippers.go:553] GET https://10.96.0.1:443/apis/discovery.k8s.io/v1/endpointslices?allowWatchBookmarks=true&resourceVersion={e}{u}&timeout=8m3s&watch=true 200 OK in {n} milliseconds\n",
    "I1113 16:{m:02d}:{s:02d}.{u:06d}       1 round_trippers.go:553] GET https://10.96.0.1:443/api/v1/services?allowWatchBookmarks=true&labelSelector=%21service.kubernetes.io%2Fheadless%2C%21service.kubernetes.io%2Fservice-proxy-name&resourceVersion={r}{u}&timeout=6m12s&watch=true 200 OK in {n} milliseconds\n",
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 config.go:133] "Calling handler.OnEndpointSliceUpdate"\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 config.go:336] "Calling handler.OnServiceUpdate"\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 endpointslicecache.go:348] "Setting endpoints for service port name" portName="default/web-{n}:http" endpoints=["10.244.{c}.{s}:8080","10.244.{e}.{m}:8080"]\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:827] "Syncing iptables rules"\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 iptables.go:358] "Running" command="iptables-save" arguments=["-t","nat"]\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1510] "Network programming" endpoint="default/web-{n}" elapsed={s}.{u}\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 servicechangetracker.go:180] "Service updated ports" service="default/web-{n}" portCount=1\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 reflector.go:325] "Watch close" reflector="k8s.io/client-go/informers/factory.go:150" type="*v1.EndpointSlice" totalItems={n}\n',
    "I1008 21:{m:02d}:{s:02d}.{u:06d}  145725 config.go:131] Calling handler.OnEndpointsUpdate\n",
    "I1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:700] Syncing iptables rules\n",
    "I1008 21:{m:02d}:{s:02d}.{u:06d}  145725 reflector.go:389] k8s.io/client-go/informers/factory.go:134: Watch close - *v1.Endpoints total {n} items received\n",
    'I1008 21:{m:02d}:{s:02d}.{u:06d}  145725 endpoints.go:{r}] Setting endpoints for "default/web-{n}:http" to [10.244.{c}.{s}:8080 10.244.{e}.{m}:8080]\n',
    "I1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:1420] Restoring iptables rules: *filter\n",
]
SYNC_OK = [
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:820] "SyncProxyRules complete" elapsed="{n}.{u}ms"\n',
    "I1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:697] syncProxyRules took {n}.{u}ms\n",
]
# Failure records: the symptoms quoted in the checks' docstrings and the seeds, verbatim.
ERRORS = [
    (  # backend mismatch, glog era (seed 000)
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 2 "
        "(iptables-restore v1.8.4 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or directory\n\n"
        "Error occurred at line: 85\nTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n)\n"
    ),
    (  # kernel MARK, structured era: multi-line err=< block, then "Sync failed"
        'E1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1481] "Failed to execute iptables-restore" err=<\n'
        '\texit status 2: ip6tables-restore v1.8.4 (legacy): unknown option "--xor-mark"\n\tError occurred at line: 16\n'
        "\tTry `ip6tables-restore -h' or 'ip6tables-restore --help' for more information.\n >\n"
        'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:858] "Sync failed" retryingTime="30s"\n'
    ),
    (  # xtables lock, glog era
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:744] Failed to ensure that filter chain KUBE-SERVICES exists: "
        'error creating chain "KUBE-EXTERNAL-SERVICES": exit status 4: Another app is currently holding the xtables lock. '
        "Stopped waiting after 5s.\n"
    ),
    (  # stale apiserver connection
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 reflector.go:178] k8s.io/client-go/informers/factory.go:135: Failed to list "
        "*core.Endpoints: Stream error http2.StreamError{{StreamID:0xea1, Code:0x2, Cause:error(nil)}} when reading response "
        "body, may be caused by closed connection. Please retry.\n"
    ),
    (
        'E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 runtime.go:69] Observed a panic: "slice bounds out of range" '
        "(runtime error: slice bounds out of range)\n"
    ),
    (  # concurrent writers (seed 000)
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 1 "
        "(iptables-restore: line 118 failed\n)\n"
    ),
    (  # iptables-restore without -w (seed 000)
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 4 "
        "(Another app is currently holding the xtables lock. Perhaps you want to use the -w option?\n)\n"
    ),
    (  # structured xtables lock timeout in an err=< block
        'E1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1481] "Failed to execute iptables-restore" err=<\n'
        "\texit status 4: Another app is currently holding the xtables lock. Stopped waiting after 5s.\n >\n"
        'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:858] "Sync failed" retryingTime="30s"\n'
    ),
    (  # reverse backend mismatch
        'E1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1481] "Failed to execute iptables-restore" err=<\n'
        "\texit status 1: iptables-restore v1.8.7 (nf_tables): Chain 'KUBE-MARK-DROP' does not exist\n"
        "\tError occurred at line: 52\n"
        "\tTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n >\n"
    ),
    (  # node IP (seed 002)
        'W0525 07:{m:02d}:{s:02d}.{u:06d}       1 server.go:604] Failed to retrieve node info: nodes "ip-10-188-166-140" not found\n'
        "W0525 07:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:312] invalid nodeIP, initializing kube-proxy with 127.0.0.1 as nodeIP\n"
    ),
    (  # IPVS graceful termination (seed 001)
        "I0111 06:{m:02d}:{s:02d}.{u:06d}       1 graceful_termination.go:160] Trying to delete rs: 10.96.0.1:443/TCP/10.130.29.80:6443\n"
    ),
    (
        "E0312 10:{m:02d}:{s:02d}.{u:06d}   14221 server_others.go:339] can't determine whether to use ipvs proxy, error: "
        "error getting ipset version, error: executable file not found in $PATH\n"
        "I0312 10:{m:02d}:{s:02d}.{u:06d}   14221 server_others.go:206] Can't use ipvs proxier, trying iptables proxier\n"
    ),
    (
        "E1120 13:{m:02d}:{s:02d}.{u:06d}       1 healthcheck.go:317] Failed to start node healthz on 0.0.0.0:10256: "
        "listen tcp 0.0.0.0:10256: bind: address already in use\n"
    ),
    (
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 reflector.go:138] k8s.io/client-go/informers/factory.go:134: Failed to watch "
        '*v1.Service: Get "https://10.96.0.1:443/api/v1/services?resourceVersion=123": read tcp 10.0.0.5:51234->10.96.0.1:443: '
        "use of closed network connection\n"
    ),
    (
        "W1113 16:{m:02d}:{s:02d}.{u:06d}       1 reflector.go:456] k8s.io/client-go/informers/factory.go:150: watch of "
        '*v1.EndpointSlice ended with: an error on the server ("unable to decode an event from the watch stream: '
        'http2: client connection lost") has prevented the request from succeeding\n'
    ),
    (  # panic with stack (panics.py docstring)
        "I0401 09:{m:02d}:{s:02d}.{u:06d}       1 server_others.go:259] Using ipvs Proxier.\n"
        "panic: runtime error: invalid memory address or nil pointer dereference\n"
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x50 pc=0x1514fb8]\n\n"
        "goroutine 1 [running]:\n"
        "k8s.io/kubernetes/pkg/proxy/ipvs.(*Proxier).syncProxyRules(0xc0001b2000)\n"
        "\t/workspace/src/k8s.io/kubernetes/_output/dockerized/go/src/k8s.io/kubernetes/pkg/proxy/ipvs/proxier.go:1062 +0x98\n"
    ),
    (
        'W1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1481] "Failed to execute iptables-restore" err=<\n'
        "\texit status 2: Warning: Extension MARK revision 0 not supported, missing kernel module?\n"
        '\tiptables-restore v1.8.4 (legacy): MARK: bad value for option "--set-mark", or out of range (0-4294967295).\n >\n'
    ),
]
# The failure records of a kube-proxy failing sync after sync (--failure-every): what a node
# whose rules have been stale for days logs, in both klog eras.
FAILURES = [
    (  # structured restore failure (backend mismatch) in an err=< block, then "Sync failed"
        'E1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1481] "Failed to execute iptables-restore" err=<\n'
        "\texit status 2: iptables-restore v1.8.4 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or "
        "directory\n\t\n\tError occurred at line: {r}\n"
        "\tTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n >\n"
        'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:858] "Sync failed" retryingTime="30s"\n'
    ),
    (  # structured xtables lock timeout in an err=< block, then "Sync failed"
        'E1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1481] "Failed to execute iptables-restore" err=<\n'
        "\texit status 4: Another app is currently holding the xtables lock. Stopped waiting after 5s.\n >\n"
        'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:858] "Sync failed" retryingTime="30s"\n'
    ),
    (  # glog-era restore failure (D10's reproduction)
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:1553] Failed to execute iptables-restore: exit status 2 "
        "(iptables-restore v1.8.4 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or directory\n"
    ),
    (  # glog-era xtables lock timeout
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:744] Failed to ensure that filter chain KUBE-SERVICES exists: "
        'error creating chain "KUBE-EXTERNAL-SERVICES": exit status 4: Another app is currently holding the xtables lock. '
        "Stopped waiting after 5s.\n"
    ),
    (  # kube-proxy's own lock wait timed out
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:1447] Failed to execute iptables-restore: failed to acquire "
        "new iptables lock: timed out waiting for the condition\n"
    ),
    (  # concurrent writers: restore failed part-way
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 1 "
        "(iptables-restore: line {r} failed\n)\n"
    ),
    (  # node lookup (seed 002), retried
        'W0525 07:{m:02d}:{s:02d}.{u:06d}       1 server.go:604] Failed to retrieve node info: nodes "ip-10-188-166-140" '
        "not found\n"
    ),
]
ERROR_EVERY = 50_000  # lines
SYNC_EVERY = 300
BLOCK_LINES = 8_192


def _fill(t: str, rnd: random.Random) -> str:
    return t.format(
        m=rnd.randrange(60),
        s=rnd.randrange(60),
        u=rnd.randrange(1_000_000),
        n=rnd.randrange(1, 999),
        e=rnd.randrange(1, 250),
        c=rnd.randrange(1, 250),
        r=rnd.randrange(100, 9000),
    )


def default_path(size_mb: int, failure_every: int | None = None) -> Path:
    dense = f"-dense{failure_every}" if failure_every else ""
    return HERE / "out" / f"kube-proxy-{size_mb}mb{dense}.log"


def generate(out: Path, size_mb: int = 1024, seed: int = 4, failure_every: int | None = None) -> int:
    """Write about ``size_mb`` MiB to ``out``; returns the bytes written.

    ``failure_every``: one record in that many is a failure record (``FAILURES``, in turn); the
    sync markers and sparse errors stay where they are in the sparse log.
    """
    if failure_every is not None and failure_every < 1:
        raise ValueError("failure_every must be at least 1")
    rnd = random.Random(seed)
    # Pre-rendered pools keep generation fast (no per-line formatting) and the text varied.
    pool = [_fill(rnd.choice(NOISE), rnd).encode() for _ in range(50_000)]
    sync_pool = [_fill(t, rnd).encode() for t in SYNC_OK for _ in range(500)]
    # A random stream of its own: the sparse part of a dense log is the sparse log's, line for line.
    frnd = random.Random(seed + 1)
    failure_pool = [[_fill(t, frnd).encode() for _ in range(200)] for t in FAILURES] if failure_every else []
    target = size_mb * 1024 * 1024
    written = 0
    line_no = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh:
        head = "".join(_fill(t, rnd) for t in STARTUP).encode()
        fh.write(head)
        written += len(head)
        while written < target:
            lines = rnd.choices(pool, k=BLOCK_LINES)
            # Specials at fixed line numbers: a sync marker every SYNC_EVERY, an error every ERROR_EVERY.
            first = line_no + 1
            if failure_every:
                for ln in range(first + (-first) % failure_every, line_no + BLOCK_LINES + 1, failure_every):
                    kind = failure_pool[(ln // failure_every) % len(FAILURES)]
                    lines[ln - first] = kind[frnd.randrange(len(kind))]
            for ln in range(first + (-first) % SYNC_EVERY, line_no + BLOCK_LINES + 1, SYNC_EVERY):
                lines[ln - first] = sync_pool[rnd.randrange(len(sync_pool))]
            for ln in range(first + (-first) % ERROR_EVERY, line_no + BLOCK_LINES + 1, ERROR_EVERY):
                lines[ln - first] = _fill(ERRORS[(ln // ERROR_EVERY) % len(ERRORS)], rnd).encode()
            line_no += BLOCK_LINES
            block = b"".join(lines)
            fh.write(block)
            written += len(block)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, nargs="?", help="output file (default: bench/out/kube-proxy-<N>mb.log)")
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument(
        "--failure-every",
        type=int,
        metavar="N",
        help="dense log: one record in N is a failure record (restore errors with err=< blocks, lock timeouts, "
        "node lookups), as a kube-proxy failing for days writes; 20 is D10's case",
    )
    args = ap.parse_args()
    out = args.out or default_path(args.size_mb, args.failure_every)
    n = generate(out, args.size_mb, args.seed, args.failure_every)
    print(f"wrote {n / 1e6:.0f} MB to {out}")


if __name__ == "__main__":
    main()
