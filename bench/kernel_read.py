"""What reading the kernel's iptables table directly costs, against `iptables-legacy-save -t nat`.

    sudo .venv/bin/python bench/kernel_read.py                   # 10,000 Services x 5 endpoints, 7 runs
    sudo .venv/bin/python bench/kernel_read.py --services 2000 --runs 11

A lab node is a throw-away network namespace (tests/lab/netns.py) holding kube-proxy-shaped rules
for N Services (bench/gen_cluster.py, loaded once with real ``iptables-legacy-restore``); it is
deleted at the end, also on failure, Ctrl-C or SIGTERM. Nothing is sent on any network, and the
rules are only read after that one load.

Then, ``--runs`` times, interleaved and alternating which goes first, each a fresh child process
started with ``ip netns exec NAME ...``:

* **save**: ``iptables-legacy-save -t nat``, its text to /dev/null (what the node agent runs);
* **direct read**: this script as a minimal Python child (``--child read``) that opens a raw socket,
  asks ``getsockopt(SOL_IP, IPT_SO_GET_INFO)`` for the nat table's size, then
  ``IPT_SO_GET_ENTRIES`` for the table itself (libc's getsockopt through ctypes: the kernel reads
  the table's name from the buffer passed in, which Python's ``socket.getsockopt`` cannot fill);
* **read + walk**: the same, then walking every entry by its ``next_offset`` in Python, counting
  the entries, the chains' ERROR entries and the DNAT targets (a minimal decode's cost);
* **floor**: the same Python child doing nothing (interpreter start-up and this module's imports),
  to show how much of the direct read is the start-up a reader inside the agent would not pay.

CPU is user + system seconds of the child (``getrusage(RUSAGE_CHILDREN)`` deltas around each run;
``ip netns exec`` enters the namespace, then execs the command in the same process: the command's
own CPU plus ip's few milliseconds), nothing subtracted; wall is the parent's clock around the run.
The Python children also report what the read alone cost them (socket, GET_INFO, GET_ENTRIES):
their process CPU clock, and ``getrusage(RUSAGE_SELF)`` for the user / system split and page faults.
Printed: min / median / max of each, the medians of user and system time and of minor page faults,
and the median ratios direct / save.

Before timing, one ``--child verify`` run fills the buffer with a pattern, reads, and checks the
read is real: the walk by ``next_offset`` ends exactly at the size GET_INFO gave, finds as many
entries as GET_INFO's ``num_entries``, and that number equals what the save text implies: one entry
per ``-A`` line, one policy entry per built-in chain, a head (ERROR target naming the chain) and a
foot (RETURN) per user chain, and one ERROR entry closing the table; the DNAT targets walked equal
the save's ``-j DNAT`` lines.

Struct layouts (uapi linux/netfilter_ipv4/ip_tables.h, linux/netfilter/x_tables.h; x86-64 sizes,
checked with offsetof against /usr/include): ``struct ipt_getinfo`` is 84 bytes: name[32],
valid_hooks, hook_entry[5], underflow[5], num_entries, size (u32 each, NF_INET_NUMHOOKS = 5).
``struct ipt_get_entries`` is name[32], size (u32), then ``struct ipt_entry entrytable[]`` at
offset 40 (the entries' u64 counters align it to 8); the kernel wants optlen == 40 + size.
``struct ipt_entry`` is 112 bytes: struct ipt_ip (84), nfcache (u32), target_offset (u16 at 88),
next_offset (u16 at 90), comefrom (u32), counters (2 x u64 at 96); then its matches and at
target_offset its ``struct xt_entry_target``: target_size (u16), name[29] at +2, revision.
"""

from __future__ import annotations

# Only what the Python child needs is imported here (its start-up counts in its figures); the
# parent's other modules are imported where it uses them.
import ctypes
import os
import resource
import socket
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IPT_SO_GET_INFO = 64
IPT_SO_GET_ENTRIES = 65
TABLE_MAXNAMELEN = 32
NUMHOOKS = 5
GETINFO_SIZE = 84  # sizeof(struct ipt_getinfo)
GET_ENTRIES_HDR = 40  # offsetof(struct ipt_get_entries, entrytable)
ENTRY_SIZE = 112  # sizeof(struct ipt_entry)
TARGET_OFFSET = 88  # offsetof(struct ipt_entry, target_offset); next_offset follows at 90
TARGET_NAME = 2  # offsetof(struct xt_entry_target, u.user.name)
NAME_LEN = 29  # XT_EXTENSION_MAXNAMELEN
ERROR_ENTRY = ENTRY_SIZE + 64  # struct ipt_entry + struct xt_error_target: the table's last entry
PATTERN = 0xA5


class IptGetinfo(ctypes.Structure):
    """``struct ipt_getinfo``: the caller fills ``name``; the kernel the rest."""

    _fields_ = (
        ("name", ctypes.c_char * TABLE_MAXNAMELEN),
        ("valid_hooks", ctypes.c_uint32),
        ("hook_entry", ctypes.c_uint32 * NUMHOOKS),
        ("underflow", ctypes.c_uint32 * NUMHOOKS),
        ("num_entries", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
    )


assert ctypes.sizeof(IptGetinfo) == GETINFO_SIZE


def _getsockopt(fd: int, opt: int, buf: ctypes.Array[ctypes.c_char] | IptGetinfo) -> None:
    """libc's getsockopt(fd, SOL_IP, opt, buf, &len) with len = sizeof buf; OSError on failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    length = ctypes.c_uint32(ctypes.sizeof(buf))
    if libc.getsockopt(fd, socket.SOL_IP, opt, ctypes.byref(buf), ctypes.byref(length)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"getsockopt({opt}): {os.strerror(err)}")
    if length.value != ctypes.sizeof(buf):
        raise OSError(f"getsockopt({opt}) returned {length.value} bytes, not {ctypes.sizeof(buf)}")


def read_table(table: str, prefill: bool = False) -> tuple[IptGetinfo, ctypes.Array[ctypes.c_char]]:
    """The table's info and its ``struct ipt_get_entries`` (header + ``info.size`` bytes of entries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as sock:
        info = IptGetinfo()
        info.name = table.encode()
        _getsockopt(sock.fileno(), IPT_SO_GET_INFO, info)
        size = int(info.size)
        buf = ctypes.create_string_buffer(GET_ENTRIES_HDR + size)
        if prefill:
            ctypes.memset(buf, PATTERN, len(buf))
        struct.pack_into(f"={TABLE_MAXNAMELEN}sI", buf, 0, table.encode(), size)
        _getsockopt(sock.fileno(), IPT_SO_GET_ENTRIES, buf)
    return info, buf


def _target_name(buf: ctypes.Array[ctypes.c_char], entry: int) -> bytes:
    """The name of the target of the entry at byte ``entry`` of ``buf`` (no copy of the buffer)."""
    (target,) = struct.unpack_from("=H", buf, entry + TARGET_OFFSET)
    start = ctypes.addressof(buf) + entry + target + TARGET_NAME
    return ctypes.string_at(start, NAME_LEN).split(b"\0", 1)[0]


def walk(buf: ctypes.Array[ctypes.c_char], size: int) -> dict[str, int]:
    """Walk the entries by ``next_offset``: how many, how many ERROR and DNAT targets, and where
    the walk ended (must be exactly ``size``). Raises ValueError on an impossible offset."""
    view = memoryview(buf).cast("B")
    entries = errors = dnat = 0
    off = 0
    end = GET_ENTRIES_HDR + size
    at = GET_ENTRIES_HDR
    unpack = struct.Struct("=HH").unpack_from
    while at < end:
        target, nxt = unpack(view, at + TARGET_OFFSET)
        if nxt < ENTRY_SIZE or not ENTRY_SIZE <= target < nxt:
            raise ValueError(f"entry {entries} at {at - GET_ENTRIES_HDR}: target_offset {target}, next_offset {nxt}")
        name = bytes(view[at + target + TARGET_NAME : at + target + TARGET_NAME + 5])
        if name == b"ERROR":
            errors += 1
        elif name == b"DNAT\0":
            dnat += 1
        entries += 1
        off = at - GET_ENTRIES_HDR
        at += nxt
    view.release()
    return {"entries": entries, "errors": errors, "dnat": dnat, "end": at - GET_ENTRIES_HDR, "last": off}


def child(mode: str, table: str) -> int:
    """The Python reader, run inside the namespace: prints one line of ``key=number`` about what it
    read, and what the read cost it (``cpu``: CLOCK_PROCESS_CPUTIME_ID, exact; ``user`` and ``sys``:
    getrusage, whose split of so short a span is sampled at the scheduler tick)."""
    if mode == "none":
        print("")
        return 0
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    c0 = time.process_time()
    t0 = time.perf_counter()
    info, buf = read_table(table, prefill=mode == "verify")
    t1 = time.perf_counter()
    c1 = time.process_time()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    size = int(info.size)
    out: dict[str, float] = {
        "size": size,
        "bytes": len(buf) - GET_ENTRIES_HDR,
        "num_entries": int(info.num_entries),
        "valid_hooks": bin(info.valid_hooks).count("1"),
        "user": r1.ru_utime - r0.ru_utime,
        "sys": r1.ru_stime - r0.ru_stime,
        "cpu": c1 - c0,
        "wall": t1 - t0,
        "minflt": r1.ru_minflt - r0.ru_minflt,
    }
    # O(1) check on every run: the table's last entry is its closing ERROR entry
    last = GET_ENTRIES_HDR + size - ERROR_ENTRY
    (nxt,) = struct.unpack_from("=H", buf, last + TARGET_OFFSET + 2)
    if nxt != ERROR_ENTRY or _target_name(buf, last) != b"ERROR":
        print(f"the table's last entry is no ERROR entry (next_offset {nxt})", file=sys.stderr)
        return 1
    if mode in ("walk", "verify"):
        w = walk(buf, size)
        out.update(w)
        if w["end"] != size or w["entries"] != info.num_entries or w["last"] != size - ERROR_ENTRY:
            print(f"walk disagrees with GET_INFO: {out}", file=sys.stderr)
            return 1
    if mode == "verify":
        # the kernel wrote every byte: no run of the pattern is left (-1: none found)
        out["unwritten_at"] = buf.raw.find(bytes([PATTERN]) * 64, GET_ENTRIES_HDR)
    print(" ".join(f"{k}={v}" for k, v in out.items()))
    return 0


def parse_child(line: str) -> dict[str, float]:
    """What :func:`child` printed, back as numbers."""
    pairs = (kv.split("=", 1) for kv in line.split())
    return {k: float(v) if "." in v or "e" in v else int(v) for k, v in pairs}


class Runs:
    """One measured command and its runs. ``python``: a Python child of this script, whose one line
    of stdout is read; any other command's stdout goes to /dev/null."""

    def __init__(self, label: str, argv: list[str], python: bool) -> None:
        self.label = label
        self.argv = argv
        self.python = python
        self.cpu: list[float] = []
        self.user: list[float] = []
        self.sys: list[float] = []
        self.wall: list[float] = []
        self.minflt: list[float] = []
        self.inner: list[dict[str, float]] = []


def measure_once(r: Runs, timeout: float) -> None:
    """Run ``r.argv`` once and record its CPU (RUSAGE_CHILDREN delta), wall and page faults."""
    import subprocess

    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(
        r.argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if r.python else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(r.argv)}: exit {res.returncode}: {res.stderr.decode(errors='replace').strip()}")
    r.user.append(c1.ru_utime - c0.ru_utime)
    r.sys.append(c1.ru_stime - c0.ru_stime)
    r.cpu.append(r.user[-1] + r.sys[-1])
    r.wall.append(wall)
    r.minflt.append(c1.ru_minflt - c0.ru_minflt)
    if r.python and res.stdout.strip():
        r.inner.append(parse_child(res.stdout.decode()))


def spread(xs: list[float]) -> str:
    import statistics

    return f"{min(xs):.3f}/{statistics.median(xs):.3f}/{max(xs):.3f}"


def expected_entries(save: str) -> tuple[int, int, int, int, int]:
    """From ``iptables-save -t nat`` text: (entries the kernel must hold, -A lines, built-in
    chains, user chains, -j DNAT lines). Entries = one per rule + one policy per built-in chain +
    a head and a foot per user chain + the table's closing ERROR entry."""
    lines = save.splitlines()
    rules = sum(1 for ln in lines if ln.startswith("-A "))
    chains = [ln.split() for ln in lines if ln.startswith(":")]
    builtin = sum(1 for c in chains if c[1] != "-")
    user = len(chains) - builtin
    dnat = sum(1 for ln in lines if ln.startswith("-A ") and " -j DNAT " in ln)
    return rules + builtin + 2 * user + 1, rules, builtin, user, dnat


def bench(services: int, endpoints: int, runs: int, timeout: float) -> int:
    import statistics

    sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests")]
    import gen_cluster as gen

    # tests/ is on the path only at run time: mypy, run on this file alone, does not see it
    from lab.netns import Netns, cleanup_stale  # type: ignore[import-not-found,unused-ignore]

    cleanup_stale("kpdkr")
    dump, _ = gen.generate(services, endpoints)
    with Netns("kpdkr") as ns:
        t0 = time.perf_counter()
        ns.check(["iptables-legacy-restore"], input=dump, timeout=900)
        print(f"loaded {services:,} Services x {endpoints} endpoints in {time.perf_counter() - t0:.1f} s", flush=True)
        del dump
        save = ns.check(["iptables-legacy-save", "-t", "nat"], timeout=timeout)
        want, rules, builtin, user, dnat = expected_entries(save)
        me = [sys.executable, "-S", os.path.abspath(__file__), "--child"]
        res = ns.run([*me, "verify", "nat"], timeout=timeout)
        if res.returncode != 0:
            raise SystemExit(f"the verification read failed: {res.stderr.strip()}")
        v = parse_child(res.stdout)
        ok = (
            v["bytes"] == v["size"]
            and v["end"] == v["size"]
            and v["entries"] == v["num_entries"] == want
            and v["errors"] == user + 1
            and v["valid_hooks"] == builtin
            and v["dnat"] == dnat
            and v["unwritten_at"] == -1
        )
        print(
            f"nat table: {rules:,} rules (-A lines), {builtin} built-in + {user:,} user chains, "
            f"{len(save) / 1e6:.1f} MB of save text; kernel: {v['size']:,} bytes, "
            f"GET_INFO num_entries {v['num_entries']:,}; walked {v['entries']:,} entries ending at byte "
            f"{v['end']:,}, {v['errors']:,} ERROR, {v['dnat']:,} DNAT; "
            f"expected {want:,} = {rules:,} + {builtin} policies + 2 x {user:,} + 1, {dnat:,} DNAT: "
            + ("match" if ok else "MISMATCH"),
            flush=True,
        )
        if not ok:
            print(v, file=sys.stderr)
            return 1
        del save
        cases = [
            Runs("iptables-legacy-save -t nat", ns.exec_argv(["iptables-legacy-save", "-t", "nat"]), False),
            Runs("direct read (Python)", ns.exec_argv([*me, "read", "nat"]), True),
            Runs("direct read + walk", ns.exec_argv([*me, "walk", "nat"]), True),
            Runs("floor: Python, no read", ns.exec_argv([*me, "none", "nat"]), True),
        ]
        for i in range(runs):
            for r in cases if i % 2 == 0 else cases[::-1]:
                measure_once(r, timeout)
            print(
                f"run {i + 1}: " + ", ".join(f"{r.label.split(' (')[0]} {r.cpu[-1]:.3f} s" for r in cases), flush=True
            )
    print(f"\nN = {services:,} Services ({rules:,} nat rules, {v['size'] / 1e6:.1f} MB in the kernel), {runs} runs")
    head = f"  {'':<29} {'CPU s min/med/max':>19} {'user med':>9} {'sys med':>8} {'wall s min/med/max':>19}"
    print(head + f" {'minflt med':>10}")
    for r in cases:
        print(
            f"  {r.label:<29} {spread(r.cpu):>19} {statistics.median(r.user):>9.3f} {statistics.median(r.sys):>8.3f}"
            f" {spread(r.wall):>19} {statistics.median(r.minflt):>10.0f}"
        )
    save_r, read_r, walk_r, floor_r = cases
    ins = read_r.inner + walk_r.inner
    print(f"inside the Python children, the read alone (socket, GET_INFO, GET_ENTRIES), {len(ins)} reads:")
    print(
        f"  CPU {spread([x['cpu'] for x in ins])} (process clock); user {spread([x['user'] for x in ins])}, "
        f"sys {spread([x['sys'] for x in ins])} (getrusage); wall {spread([x['wall'] for x in ins])}; "
        f"minflt {statistics.median([x['minflt'] for x in ins]):.0f} (median)"
    )
    med = statistics.median
    for r in (read_r, walk_r, floor_r):
        print(
            f"{r.label} / save (medians): CPU {med(r.cpu) / med(save_r.cpu):.3f}, "
            f"wall {med(r.wall) / med(save_r.wall):.3f}"
        )
    return 0


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":  # the Python reader: no argparse to import
        return child(sys.argv[2], sys.argv[3])
    import argparse
    import signal

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--services", type=int, default=10_000)
    p.add_argument("--endpoints", type=int, default=5)
    p.add_argument("--runs", type=int, default=7, help="interleaved rounds")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per measured command")
    a = p.parse_args()
    if os.geteuid() != 0:
        print("needs root (a network namespace, iptables)", file=sys.stderr)
        return 2

    def _term(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the namespace's `with`, which deletes it

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGHUP, _term)
    return bench(a.services, a.endpoints, a.runs, a.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
