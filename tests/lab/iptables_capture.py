"""Load a kube-proxy iptables-restore payload into real iptables and keep what it prints back.

:func:`capture` feeds the payload to the real ``iptables-legacy-restore --noflush`` and
``iptables-nft-restore --noflush``, each in a fresh network namespace (see :mod:`.netns`), adds the
hook jumps kube-proxy installs itself with ``iptables -A`` (the payload does not carry them), and
returns the real output of every listing command kpdoctor reads. :func:`capture_errors` does the
same for a few tiny payloads that make real iptables fail, keeping the exact error text and exit
code. Nothing sends traffic: the namespaces only hold rules.

The hook jumps follow ``tests/data/upstream/realize.sh``: each is appended only when its
target chain exists after the restore, in this order::

    filter INPUT    -> KUBE-PROXY-FIREWALL     (ctstate NEW, "kubernetes load balancer firewall")
    filter INPUT    -> KUBE-NODEPORTS          ("kubernetes health check service ports")
    filter INPUT    -> KUBE-EXTERNAL-SERVICES  (ctstate NEW, "kubernetes externally-visible service portals")
    filter INPUT    -> KUBE-FIREWALL
    filter FORWARD  -> KUBE-PROXY-FIREWALL     (ctstate NEW, "kubernetes load balancer firewall")
    filter FORWARD  -> KUBE-FORWARD            ("kubernetes forwarding rules")
    filter FORWARD  -> KUBE-SERVICES           (ctstate NEW, "kubernetes service portals")
    filter FORWARD  -> KUBE-EXTERNAL-SERVICES  (ctstate NEW, "kubernetes externally-visible service portals")
    filter OUTPUT   -> KUBE-PROXY-FIREWALL     (ctstate NEW, "kubernetes load balancer firewall")
    filter OUTPUT   -> KUBE-SERVICES           (ctstate NEW, "kubernetes service portals")
    filter OUTPUT   -> KUBE-FIREWALL
    nat PREROUTING  -> KUBE-SERVICES           ("kubernetes service portals")
    nat OUTPUT      -> KUBE-SERVICES           ("kubernetes service portals")
    nat POSTROUTING -> KUBE-POSTROUTING        ("kubernetes postrouting rules")

Payloads that use ``-m nfacct --nfacct-name NAME`` (kube-proxy's metrics counters) only load when
the accounting object exists, so every such NAME is first created in the namespace over netlink
(what ``nfacct add NAME`` does; the ``nfacct`` tool itself is not needed).

CLI::

    python -m tests.lab.iptables_capture [--family 4|6] [--errors] RULESFILE OUTDIR

writes each output of :func:`capture` to ``OUTDIR/KEY.txt`` (and with ``--errors`` each of
:func:`capture_errors` to ``OUTDIR/errors/KEY.txt``). Run it from the repository root, as root.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .netns import Netns

_CT_NEW = ["-m", "conntrack", "--ctstate", "NEW"]


def _comment(text: str) -> list[str]:
    return ["-m", "comment", "--comment", text]


HOOKS: list[tuple[str, str, str, list[str]]] = [
    ("filter", "INPUT", "KUBE-PROXY-FIREWALL", _CT_NEW + _comment("kubernetes load balancer firewall")),
    ("filter", "INPUT", "KUBE-NODEPORTS", _comment("kubernetes health check service ports")),
    ("filter", "INPUT", "KUBE-EXTERNAL-SERVICES", _CT_NEW + _comment("kubernetes externally-visible service portals")),
    ("filter", "INPUT", "KUBE-FIREWALL", []),
    ("filter", "FORWARD", "KUBE-PROXY-FIREWALL", _CT_NEW + _comment("kubernetes load balancer firewall")),
    ("filter", "FORWARD", "KUBE-FORWARD", _comment("kubernetes forwarding rules")),
    ("filter", "FORWARD", "KUBE-SERVICES", _CT_NEW + _comment("kubernetes service portals")),
    (
        "filter",
        "FORWARD",
        "KUBE-EXTERNAL-SERVICES",
        _CT_NEW + _comment("kubernetes externally-visible service portals"),
    ),
    ("filter", "OUTPUT", "KUBE-PROXY-FIREWALL", _CT_NEW + _comment("kubernetes load balancer firewall")),
    ("filter", "OUTPUT", "KUBE-SERVICES", _CT_NEW + _comment("kubernetes service portals")),
    ("filter", "OUTPUT", "KUBE-FIREWALL", []),
    ("nat", "PREROUTING", "KUBE-SERVICES", _comment("kubernetes service portals")),
    ("nat", "OUTPUT", "KUBE-SERVICES", _comment("kubernetes service portals")),
    ("nat", "POSTROUTING", "KUBE-POSTROUTING", _comment("kubernetes postrouting rules")),
]
"""(table, builtin chain, target chain, match args) of each hook jump, in the order they are appended."""

KEYS = (
    "legacy-save",
    "legacy-save-counters",
    "nft-save",
    "nft-save-counters",
    "nft-save-with-legacy-warning",
    "nft-save-with-legacy-warning-pipe",
    "legacy-S",
    "nft-S",
    "legacy-L-nv",
    "nft-L-nv",
    "version-legacy",
    "version-nft",
    "restore-version",
)
"""Keys of the dict :func:`capture` returns."""

# nfnetlink_acct: create an accounting object (what `nfacct add NAME` does). Runs inside the
# namespace as `python3 -c SRC NAME...`, because Python 3.11 has no os.setns.
_NFACCT_ADD_SRC = r"""
import errno, socket, struct, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
s.bind((0, 0))
for seq, name in enumerate(sys.argv[1:], 1):
    raw = name.encode() + b"\0"
    attr = struct.pack("=HH", 4 + len(raw), 1) + raw  # NFACCT_NAME
    attr += b"\0" * (-len(attr) % 4)
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, 0) + attr  # nfgenmsg
    # type NFNL_SUBSYS_ACCT<<8 | NFNL_MSG_ACCT_NEW; flags REQUEST|ACK|EXCL|CREATE
    s.send(struct.pack("=IHHII", 16 + len(body), 7 << 8, 0x1 | 0x4 | 0x200 | 0x400, seq, 0) + body)
    resp = s.recv(65536)
    err = -struct.unpack("=i", resp[16:20])[0] if struct.unpack("=H", resp[4:6])[0] == 2 else 0
    if err not in (0, errno.EEXIST):
        sys.exit(f"nfacct add {name}: {errno.errorcode.get(err, err)}")
"""


def nfacct_names(rules: str) -> list[str]:
    """The ``--nfacct-name`` objects a payload refers to, sorted and unique."""
    return sorted(set(re.findall(r"--nfacct-name\s+(\S+)", rules)))


def _tools(family: int) -> str:
    if family == 4:
        return "iptables"
    if family == 6:
        return "ip6tables"
    raise ValueError(f"family must be 4 or 6, not {family!r}")


def load(ns: Netns, rules: str, backend: str, family: int = 4) -> None:
    """Restore ``rules`` with ``--noflush`` into ``ns`` on one backend and add kube-proxy's hook jumps.

    Raises :class:`RuntimeError` with iptables' own message when the restore or a hook fails.
    """
    ipt = f"{_tools(family)}-{backend}"
    names = nfacct_names(rules)
    if names:
        ns.check([sys.executable, "-c", _NFACCT_ADD_SRC, *names])
    ns.check([f"{ipt}-restore", "--noflush"], input=rules)
    for table, chain, target, matches in HOOKS:
        if ns.run([ipt, "-t", table, "-S", target]).returncode == 0:
            ns.check([ipt, "-t", table, "-A", chain, *matches, "-j", target])


def capture(rules: str, family: int = 4) -> dict[str, str]:
    """Real outputs of both iptables backends for the restore payload ``rules``; keys are :data:`KEYS`.

    Each value is the command's stdout, except the two ``nft-save-with-legacy-warning*``. The legacy
    listings come from a namespace that holds only legacy rules, the ``nft-*`` ones from a
    namespace that holds only nf_tables rules (so they carry no warning), and:

    ``nft-save-with-legacy-warning``
        ``iptables-nft-save`` in a third namespace where the payload is loaded into BOTH backends,
        which is what makes iptables-nft-save print
        ``# Warning: iptables-legacy tables present, use iptables-legacy-save to see them``.
        iptables writes that warning to **stderr** (the rules go to stdout) after it has written
        all the rules. The value is stdout and stderr merged as a terminal shows them (both on one
        pseudo-terminal, where stdout is line-buffered): the rules, then the warning as the last
        line. (``iptables-nft -S`` and ``-L`` print their own variant, "... use iptables-legacy to
        see them", also on stderr but BEFORE the listing.)
    ``nft-save-with-legacy-warning-pipe``
        The same command with stderr merged into stdout through a pipe (``2>&1 | cat``, a log
        collector, ``kubectl exec ... 2>&1``). stdout to a pipe is block-buffered, so the warning
        lands wherever a buffer flush boundary falls (with glibc, at byte 8192 of the output),
        often in the middle of a rule line: ``-A KUBE-SERVI# Warning: ...\nCES -d ...``.
    ``legacy-S`` / ``nft-S``
        ``iptables -t nat -S`` followed by ``iptables -t filter -S``, concatenated.
    ``legacy-L-nv`` / ``nft-L-nv``
        ``iptables -t nat -L -n -v``.
    ``version-legacy`` / ``version-nft`` / ``restore-version``
        ``iptables-legacy --version``, ``iptables-nft --version``, ``iptables-legacy-restore --version``.

    For ``family=6`` every command is the ip6tables one. Raises :class:`RuntimeError` when
    iptables rejects the payload or a listing fails.
    """
    ipt = _tools(family)
    out: dict[str, str] = {}
    for be in ("legacy", "nft"):
        with Netns() as ns:
            load(ns, rules, be, family)
            cmd = f"{ipt}-{be}"
            out[f"{be}-save"] = ns.check([f"{cmd}-save"])
            out[f"{be}-save-counters"] = ns.check([f"{cmd}-save", "-c"])
            out[f"{be}-S"] = ns.check([cmd, "-t", "nat", "-S"]) + ns.check([cmd, "-t", "filter", "-S"])
            out[f"{be}-L-nv"] = ns.check([cmd, "-t", "nat", "-L", "-n", "-v"])
            out[f"version-{be}"] = ns.check([cmd, "--version"])
            if be == "legacy":
                out["restore-version"] = ns.check([f"{cmd}-restore", "--version"])
    with Netns() as ns:
        load(ns, rules, "nft", family)
        load(ns, rules, "legacy", family)
        code, text = ns.run_tty([f"{ipt}-nft-save"])
        if code != 0:
            raise RuntimeError(f"{ipt}-nft-save in {ns.name}: exit {code}: {text.strip()}")
        out["nft-save-with-legacy-warning"] = text
        res = subprocess.run(
            ns.exec_argv([f"{ipt}-nft-save"]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=30,
            check=False,
        )
        if res.returncode != 0:
            raise RuntimeError(f"{ipt}-nft-save in {ns.name}: exit {res.returncode}: {res.stdout.strip()}")
        out["nft-save-with-legacy-warning-pipe"] = res.stdout
    return {k: out[k] for k in KEYS}


@dataclass(frozen=True)
class Failure:
    """What one real iptables command did with a payload."""

    argv: list[str]
    stdin: str
    exit: int
    stdout: str
    stderr: str

    def render(self) -> str:
        """``# exit=N``, ``# argv=...``, ``# stdin=...`` (escaped, one line), then stderr verbatim."""
        return (
            f"# exit={self.exit}\n# argv={shlex.join(self.argv)}\n"
            f"# stdin={self.stdin.encode('unicode_escape').decode('ascii')}\n"
            + (f"# stdout={self.stdout.encode('unicode_escape').decode('ascii')}\n" if self.stdout else "")
            + self.stderr
        )


ERROR_PAYLOADS: dict[str, tuple[str, str]] = {
    # key: (restore command, payload)
    "legacy-restore-missing-chain": (
        "iptables-legacy-restore",
        "*nat\n:KUBE-SVC-X - [0:0]\n-A KUBE-SVC-X -j KUBE-MARK-DROP\nCOMMIT\n",
    ),
    "nft-restore-missing-chain": (
        "iptables-nft-restore",
        "*nat\n:KUBE-SVC-X - [0:0]\n-A KUBE-SVC-X -j KUBE-MARK-DROP\nCOMMIT\n",
    ),
    # A match the kernel rejects (no nfacct object of that name): the failure comes from the kernel
    # at commit time, not from the parser, and the two backends report it differently.
    "legacy-restore-kernel-reject": (
        "iptables-legacy-restore",
        "*filter\n:KUBE-FORWARD - [0:0]\n"
        "-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP\n"
        "COMMIT\n",
    ),
    "nft-restore-kernel-reject": (
        "iptables-nft-restore",
        "*filter\n:KUBE-FORWARD - [0:0]\n"
        "-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP\n"
        "COMMIT\n",
    ),
    "ip6-legacy-restore-xor-mark": (
        "ip6tables-legacy-restore",
        "*nat\n:X - [0:0]\n-A X -j MARK --xor-mark 0x4000\nCOMMIT\n",
    ),
}
"""Tiny payloads for :func:`capture_errors`; each runs with ``--noflush`` in a fresh namespace."""


def capture_errors() -> dict[str, Failure]:
    """Run each of :data:`ERROR_PAYLOADS` with ``--noflush`` in its own fresh namespace.

    Nothing else exists in the namespace, so chain KUBE-MARK-DROP exists in neither backend
    (what real iptables prints does not depend on the other backend). The argv recorded is the
    one run inside the namespace, without the ``ip netns exec NAME`` prefix.
    """
    out: dict[str, Failure] = {}
    for key, (cmd, payload) in ERROR_PAYLOADS.items():
        argv = [cmd, "--noflush"]
        with Netns() as ns:
            res = ns.run(argv, input=payload)
        out[key] = Failure(argv, payload, res.returncode, res.stdout, res.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.lab.iptables_capture", description=__doc__.split("\n")[0])
    p.add_argument("rulesfile", type=Path, help="an iptables-restore payload, e.g. kube-proxy's")
    p.add_argument("outdir", type=Path, help="KEY.txt is written here for every output")
    p.add_argument("--family", type=int, choices=(4, 6), default=4)
    p.add_argument("--errors", action="store_true", help="also write OUTDIR/errors/KEY.txt from capture_errors()")
    a = p.parse_args(argv)
    outputs = capture(a.rulesfile.read_text(), a.family)
    a.outdir.mkdir(parents=True, exist_ok=True)
    for key, text in outputs.items():
        (a.outdir / f"{key}.txt").write_text(text)
    if a.errors:
        (a.outdir / "errors").mkdir(exist_ok=True)
        for key, failure in capture_errors().items():
            (a.outdir / "errors" / f"{key}.txt").write_text(failure.render())
    print(f"wrote {len(outputs)} outputs to {a.outdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
