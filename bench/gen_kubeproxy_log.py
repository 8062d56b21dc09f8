"""Write a synthetic kube-proxy log: mostly ``--v=4`` noise of both klog eras, sparse errors.

Deterministic (seeded) and streamed in large blocks, so 1 GB takes seconds and memory stays flat.
Usage: python bench/gen_kubeproxy_log.py OUT.log [--size-mb 1024]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

NOISE = [
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1464] "Reloading service iptables data" numServices={n} numEndpoints={e} numFilterChains=4 numFilterRules=7 numNATChains={c} numNATRules={r}\n',
    "I1113 16:{m:02d}:{s:02d}.{u:06d}       1 round_trippers.go:553] GET https://10.96.0.1:443/apis/discovery.k8s.io/v1/endpointslices?allowWatchBookmarks=true&resourceVersion={e}{u}&timeout=8m3s&watch=true 200 OK in {n} milliseconds\n",
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 config.go:133] "Calling handler.OnEndpointSliceUpdate"\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 endpointslicecache.go:348] "Setting endpoints for service port name" portName="default/web-{n}:http" endpoints=["10.244.{c}.{s}:8080","10.244.{e}.{m}:8080"]\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:827] "Syncing iptables rules"\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 iptables.go:358] "Running" command="iptables-save" arguments=["-t","nat"]\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1510] "Network programming" endpoint="default/web-{n}" elapsed={s}.{u}\n',
    'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 servicechangetracker.go:180] "Service updated ports" service="default/web-{n}" portCount=1\n',
    "I1008 21:{m:02d}:{s:02d}.{u:06d}  145725 config.go:131] Calling handler.OnEndpointsUpdate\n",
    "I1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:700] Syncing iptables rules\n",
    "I1008 21:{m:02d}:{s:02d}.{u:06d}  145725 reflector.go:389] k8s.io/client-go/informers/factory.go:134: Watch close - *v1.Endpoints total {n} items received\n",
]
SYNC_OK = 'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:820] "SyncProxyRules complete" elapsed="{n}.{u}ms"\n'
ERRORS = [
    (
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 2 "
        "(iptables-restore v1.8.4 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or directory\n\n"
        "Error occurred at line: 85\nTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n)\n"
    ),
    (
        'E1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:1481] "Failed to execute iptables-restore" err=<\n'
        '\texit status 2: ip6tables-restore v1.8.4 (legacy): unknown option "--xor-mark"\n\tError occurred at line: 16\n'
        "\tTry `ip6tables-restore -h' or 'ip6tables-restore --help' for more information.\n >\n"
        'I1113 16:{m:02d}:{s:02d}.{u:06d}       1 proxier.go:858] "Sync failed" retryingTime="30s"\n'
    ),
    (
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:744] Failed to ensure that filter chain KUBE-SERVICES exists: "
        'error creating chain "KUBE-EXTERNAL-SERVICES": exit status 4: Another app is currently holding the xtables lock. '
        "Stopped waiting after 5s.\n"
    ),
    (
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 reflector.go:178] k8s.io/client-go/informers/factory.go:135: Failed to list "
        "*core.Endpoints: Stream error http2.StreamError{{StreamID:0xea1, Code:0x2, Cause:error(nil)}} when reading response "
        "body, may be caused by closed connection. Please retry.\n"
    ),
    (
        'E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 runtime.go:69] Observed a panic: "slice bounds out of range" '
        "(runtime error: slice bounds out of range)\n"
    ),
    (
        "E1008 21:{m:02d}:{s:02d}.{u:06d}  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 1 "
        "(iptables-restore: line 118 failed\n)\n"
    ),
]
ERROR_EVERY = 50_000  # lines
SYNC_EVERY = 300


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


def generate(out: Path, size_mb: int, seed: int = 4) -> int:
    """Write about ``size_mb`` MB; returns bytes written."""
    rnd = random.Random(seed)
    # A pool of pre-rendered noise lines keeps generation fast and the text varied.
    pool = [_fill(rnd.choice(NOISE), rnd) for _ in range(20_000)]
    target = size_mb * 1024 * 1024
    written = 0
    line_no = 0
    with open(out, "w", encoding="utf-8") as fh:
        while written < target:
            block: list[str] = []
            for _ in range(5_000):
                line_no += 1
                if line_no % ERROR_EVERY == 0:
                    block.append(_fill(ERRORS[(line_no // ERROR_EVERY) % len(ERRORS)], rnd))
                elif line_no % SYNC_EVERY == 0:
                    block.append(_fill(SYNC_OK, rnd))
                else:
                    block.append(pool[rnd.randrange(len(pool))])
            text = "".join(block)
            fh.write(text)
            written += len(text.encode("utf-8"))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--size-mb", type=int, default=1024)
    args = ap.parse_args()
    n = generate(args.out, args.size_mb)
    print(f"wrote {n / 1e6:.0f} MB to {args.out}")


if __name__ == "__main__":
    main()
