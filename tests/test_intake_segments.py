"""One paste, several kinds of output: each read as what it is, its lines still the user's.

The outputs are real (tests/data, each file's SOURCES.md says where from); they are joined as
people join them in one issue body: a blank line between, or a markdown heading, or nothing but a
log's lines running into a listing.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from conftest import DATA

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.bundle.segments import SHAPES, segment, shape_of
from kpdoctor.bundle.sniff import Typed
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.knowledge import catalogue
from kpdoctor.model import Severity
from kpdoctor.parse.shapes import REGISTERED

# A real output of each kind of listing a paste holds (its first lines: people paste a part).
SAMPLES: dict[Kind, tuple[Path, int]] = {
    Kind.KUBE_PROXY_LOG: (DATA / "logs" / "iptables-backend-mismatch.log", 12),
    Kind.IPTABLES_SAVE: (DATA / "iptables" / "real" / "legacy-save.txt", 40),
    Kind.IPTABLES_RULES_S: (DATA / "iptables" / "real" / "legacy-S.txt", 30),
    Kind.IPTABLES_LIST: (DATA / "iptables" / "real" / "legacy-L-nv.txt", 30),
    Kind.IPVSADM: (DATA / "ipvsadm" / "stats-kube-router-160.txt", 12),
    Kind.CONNTRACK_ENTRIES: (DATA / "node" / "conntrack-L-nat.txt", 8),
    Kind.CONNTRACK_STATS: (DATA / "node" / "conntrack-S-6.18-invalid.txt", 4),
    Kind.NF_CONNTRACK_STAT: (DATA / "node" / "proc-stat-nf_conntrack-6.18-invalid.txt", 4),
    Kind.NETSTAT: (DATA / "node" / "netstat-s-overflow.txt", 200),
    Kind.NSTAT: (DATA / "node" / "nstat-az-overflow.txt", 40),
    Kind.LISTENERS: (DATA / "node" / "ss-ltn.txt", 10),
    Kind.SYSCTL: (DATA / "node" / "sysctl-named.txt", 10),
    Kind.MODULES: (DATA / "node" / "lsmod-talos-mlx5.txt", 12),
    Kind.IP_LINK: (DATA / "node" / "ip-link.txt", 10),
    Kind.KERNEL_LOG: (DATA / "node" / "dmesg-formats.txt", 10),
    Kind.PACKET_CAPTURE: (DATA / "tcpdump" / "bridge-nf-call-iptables-0.txt", 20),
}


def _sample(kind: Kind) -> str:
    path, n = SAMPLES[kind]
    return "\n".join(path.read_text(encoding="utf-8").splitlines()[:n]).strip("\n")


def _read(tmp_path: Path, text: str) -> dict[Kind, list[tuple[int, str]]]:
    p = tmp_path / "paste.txt"
    p.write_text(text, encoding="utf-8")
    ev = load([p])
    out: dict[Kind, list[tuple[int, str]]] = {}
    for a in ev.artifacts:
        out.setdefault(a.kind, []).append((a.first_line, a.read_text()))
    return out


def _holds(text: str, part: tuple[int, str]) -> bool:
    """Every line of a part read is the paste's own line at the same number (or left empty)."""
    lines = text.split("\n")
    first, body = part
    return all(ln in ("", lines[first - 1 + n]) for n, ln in enumerate(body.split("\n")[:-1]))


@pytest.mark.parametrize("kind", list(SAMPLES), ids=lambda k: k.name)
def test_each_sample_is_its_kind_alone(tmp_path: Path, kind: Kind) -> None:
    """The samples themselves: each is read as its kind (the premise of the pairs below)."""
    assert set(_read(tmp_path, _sample(kind) + "\n")) == {kind}


# Every ordered pair would be 182 runs; each kind meets every other once, in both orders across
# the two rounds below (a kind's first and second neighbour).
_KINDS = list(SAMPLES)
_PAIRS = [(a, b) for a, b in itertools.permutations(_KINDS, 2) if (_KINDS.index(b) - _KINDS.index(a)) % 7 in (1, 3)]


@pytest.mark.parametrize(("first", "second"), _PAIRS, ids=lambda k: k.name)
def test_two_outputs_in_one_paste_are_both_read(tmp_path: Path, first: Kind, second: Kind) -> None:
    text = _sample(first) + "\n\n" + _sample(second) + "\n"
    read = _read(tmp_path, text)
    assert first in read and second in read, f"read as {sorted(k.name for k in read)}"
    for parts in read.values():
        assert all(_holds(text, part) for part in parts)


def test_a_heading_between_two_listings_of_one_kind_keeps_them_apart(tmp_path: Path) -> None:
    """Two `iptables-save` greps (before and after an upgrade) under their headings: two
    listings, not one holding both states."""
    before = '-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -m mark --mark 0x8000/0x8000 -j DROP'
    after = '-A KUBE-FIREWALL -m comment --comment "kubernetes firewall for dropping marked packets" -j DROP'
    text = f"### before\n\n{before}\n\n### after\n\n{after}\n"
    read = _read(tmp_path, text)
    assert [first for first, _ in read[Kind.IPTABLES_SAVE]] == [3, 7]
    # a blank line alone does not say so: one listing
    assert len(_read(tmp_path, f"{before}\n\n{after}\n")[Kind.IPTABLES_SAVE]) == 1


def test_a_comment_with_two_hashes_inside_a_file_is_not_a_heading(tmp_path: Path) -> None:
    rules = _sample(Kind.IPTABLES_SAVE).split("\n")
    text = "\n".join([*rules[:5], "## the NAT rules", *rules[5:]]) + "\n"
    assert len(_read(tmp_path, text)[Kind.IPTABLES_SAVE]) == 1


def test_log_lines_running_into_a_listing_are_read_apart_and_the_listing_whole(tmp_path: Path) -> None:
    """kube-proxy's log tailing into a `conntrack -L` (no blank line between, and a log record
    between two entries): the log is a log, the entries one listing."""
    log = _sample(Kind.KUBE_PROXY_LOG).split("\n")
    entries = _sample(Kind.CONNTRACK_ENTRIES).split("\n")
    text = "\n".join([*log[:6], *entries[:3], log[6], *entries[3:]]) + "\n"
    read = _read(tmp_path, text)
    assert len(read[Kind.CONNTRACK_ENTRIES]) == 1 and len(read[Kind.KUBE_PROXY_LOG]) == 1
    (first, body), (lfirst, lbody) = read[Kind.CONNTRACK_ENTRIES][0], read[Kind.KUBE_PROXY_LOG][0]
    assert first == 7 and body.count("src=") >= len(entries) * 2 - 2
    assert log[6] not in body and log[6] in lbody and lfirst == 1


def test_a_restore_payload_a_log_echoes_stays_in_the_log(tmp_path: Path) -> None:
    """kube-proxy logs what it fed iptables-restore after `Rules:`; Calico's felix after `Input
    was:`: the payload is the record's, never the node's rules."""
    kp = (
        "E0729 09:44:27.389373       1 proxier.go:1415] Failed to execute iptables-restore: exit status 2 "
        "(iptables-restore v1.6.0: Couldn't load target `KUBE-MARK-DROP':No such file or directory\n"
        "\n"
        "Error occurred at line: 54\n"
        "Try `iptables-restore -h' or 'iptables-restore --help' for more information.\n"
        ")\n"
        "I0729 09:44:27.389405       1 proxier.go:1417] Closing local ports after iptables-restore failure\n"
    )
    echo = "Rules:\n*filter\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j ACCEPT\nCOMMIT\n"
    assert Kind.IPTABLES_SAVE not in _read(tmp_path, kp + echo)
    felix = (
        "2015-04-15 09:22:23,427 [ERROR][4] calico.felix.fiptables 434: Failed to run iptables-restore.\n"
        "Error:\niptables-restore: line 2 failed\n\nInput was:\n*nat\n"
        "--delete PREROUTING --jump felix-PREROUTING\nCOMMIT\n"
    )
    assert Kind.IPTABLES_SAVE not in _read(tmp_path, felix)


def test_a_log_paragraph_takes_the_paste_s_word_for_whose_it_is(tmp_path: Path) -> None:
    """A process line naming kube-proxy, then two of its flag lines (which alone could be any
    component's): both read, the log as kube-proxy's."""
    text = (
        "8463 /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=${NODE_NAME}\n"
        "\n"
        'I0728 02:09:00.385519       1 flags.go:27] FLAG: --alsologtostderr="false"\n'
        'I0728 02:09:00.385634       1 flags.go:27] FLAG: --bind-address="0.0.0.0"\n'
    )
    read = _read(tmp_path, text)
    assert set(read) == {Kind.KUBE_PROXY_CMDLINE, Kind.KUBE_PROXY_LOG}
    assert read[Kind.KUBE_PROXY_LOG][0][0] == 3


def test_lines_after_a_document_that_are_not_its_own_do_not_break_it(tmp_path: Path) -> None:
    """A ConfigMap, then the command run and what it printed: the YAML is still read, the rest
    is said not to be read (never glued onto the YAML, which would then not parse)."""
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config\n  namespace: metallb-system\ndata:\n  config: |\n    peers: []\n"
    text = cm + "\ncurl 127.0.0.1:10249/debug/pprof/\n404 page not found\n"
    p = tmp_path / "paste.txt"
    p.write_text(text)
    ev = load([p])
    assert [a.kind for a in ev.artifacts] == [Kind.K8S_OBJECTS]
    assert any(pr.source.endswith(":10-11") for pr in ev.problems)


def test_a_heredoc_anywhere_in_a_paste_is_the_file_it_writes(tmp_path: Path) -> None:
    text = (
        "cat <<EOF > /tmp/kube-proxy.yaml\n"
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"
        "kind: KubeProxyConfiguration\n"
        "mode: ipvs\n"
        "EOF\n"
        "\n"
        "[root@node1 ~]# uname -r\n"
        "5.10.0-21-amd64\n"
    )
    read = _read(tmp_path, text)
    assert Kind.KUBE_PROXY_CONFIG in read and Kind.UNAME in read


def test_a_one_paste_is_diagnosed_as_its_files_are(tmp_path: Path) -> None:
    """The end: a log and the node's listing in one paste name the same cause as the two files."""
    log = DATA / "logs" / "iptables-backend-mismatch.log"
    files = diagnose_paths([log], min_severity=Severity.INFO)[0].findings
    text = _sample(Kind.SYSCTL) + "\n\n" + log.read_text()
    p = tmp_path / "paste.txt"
    p.write_text(text)
    pasted = diagnose_paths([p], min_severity=Severity.INFO)[0].findings
    assert files and pasted and pasted[0].cause == files[0].cause


def test_every_registered_shape_has_a_sample_its_lines_take() -> None:
    """One registration per shape: a listing's kind in :data:`SHAPES` has its real output here,
    whose lines (most of them) take that shape."""
    # (a shape its parser module declares is held to its own example: tests/test_evidence_shapes.py)
    listing = {s.kind for s in SHAPES if s.kind is not None and not s.log} - {r.kind for r in REGISTERED}
    kinds_tested = {k for k in SAMPLES if k in listing or k == Kind.IPTABLES_RULES_S}
    assert listing - {Kind.IPSET, Kind.NFT_RULESET_TEXT, Kind.PROCESSES, Kind.UNAME, Kind.OS_RELEASE,
                      Kind.IPTABLES_VERSION, Kind.NFT_VERSION} <= kinds_tested  # fmt: skip
    for kind in kinds_tested & listing:
        lines = [ln for ln in _sample(kind).split("\n") if ln.strip()]
        shaped = [shape_of(ln) for ln in lines]
        assert sum(1 for s in shaped if s is not None and s.kind == kind) >= len(lines) // 3, kind


def test_a_paste_of_one_kind_is_not_split() -> None:
    text = (DATA / "iptables" / "real" / "legacy-save.txt").read_text()
    assert segment(text, catalogue(), Typed(Kind.IPTABLES_SAVE, {})) is None
    log = (DATA / "logs" / "ipvs-startup-panic.log").read_text()
    assert segment(log, catalogue(), Typed(Kind.KUBE_PROXY_LOG, {})) is None


def test_only_the_first_part_of_a_commands_output_is_said_to_be_its_output(tmp_path: Path) -> None:
    """After a command's output, a fence and a line the user pasted from elsewhere: that line is
    read, but not as the command's output."""
    entry = _sample(Kind.CONNTRACK_ENTRIES).split("\n")[1]
    text = f"[root@node-3 ~]# sysctl net.ipv4.ip_forward\nnet.ipv4.ip_forward = 1\n```\n\n{entry}\n"
    p = tmp_path / "paste.txt"
    p.write_text(text)
    ev = load([p])
    (sysctl,), (ct,) = ev.of(Kind.SYSCTL), ev.of(Kind.CONNTRACK_ENTRIES)
    assert sysctl.attrs["command"] == "sysctl net.ipv4.ip_forward" and "command" not in ct.attrs
    assert ct.first_line == 5


def test_only_the_lines_an_output_prints_around_its_own_do_not_make_it(tmp_path: Path) -> None:
    """k3s's check-config prints `- swap: disabled` and `- routes: ok` around its kernel options;
    those two lines alone under a manifest are not a kernel configuration (nor anything)."""
    paste = tmp_path / "paste.txt"
    paste.write_text(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  clusterIP: 10.96.0.20\n"
        "  ports:\n  - port: 80\n---\n- swap: disabled\n- routes: ok\n"
    )
    kinds = [a.kind for a in load([paste]).artifacts]
    assert Kind.KERNEL_CONFIG not in kinds and Kind.K8S_OBJECTS in kinds
    paste.write_text("- swap: disabled\n- routes: ok\n- CONFIG_NETFILTER_XT_MATCH_COMMENT: missing (fail)\n")
    assert [a.kind for a in load([paste]).artifacts] == [Kind.KERNEL_CONFIG]
