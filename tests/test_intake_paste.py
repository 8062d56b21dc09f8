"""Evidence as users paste it (issue 15, part 1): wrapped in markdown or grep prefixes, copied
without its header, grep'd out of a dump, typed in odd shells. Every input here is real posted
output (the corpus of tests/realworld, or this repository's real logs) or that output put
through the wrapper that really produces the shape (an indented markdown list, `grep -n`)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import DATA, write
from hypothesis import given, settings
from hypothesis import strategies as st

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.bundle.paste import unwrap_paste
from kpdoctor.bundle.segments import segment
from kpdoctor.bundle.sniff import sniff
from kpdoctor.bundle.transcript import hint_from_command, split_transcript
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import Facts
from kpdoctor.knowledge import catalogue

CASES = Path(__file__).parent / "realworld" / "cases"
XTABLES_LOG = DATA / "logs" / "xtables-lock.log"


def _causes(*paths: Path) -> list[str]:
    rep, _ = diagnose_paths(paths)
    return [f.cause for f in rep.findings]


# -- wrappers ------------------------------------------------------------------------------------


def test_a_log_pasted_into_a_markdown_list_and_quote_is_read_with_its_line_numbers(tmp_path: Path) -> None:
    log = XTABLES_LOG.read_text()
    pasted = "".join(f"   > {line}\n" if line else "   >\n" for line in log.splitlines())
    p = tmp_path / "comment.md"
    p.write_text(pasted)
    ev = load([p])
    (art,) = ev.artifacts
    assert art.kind == Kind.KUBE_PROXY_LOG and "markdown quote markers" in art.attrs["paste"]
    assert art.text.splitlines() == log.splitlines()  # line N is still line N
    assert _causes(p) == _causes(XTABLES_LOG)


@pytest.mark.parametrize("width", [80, 120])
def test_a_log_broken_at_a_terminals_width_is_joined_back_on_its_lines(tmp_path: Path, width: int) -> None:
    """`fold -w 80` (what a terminal or a mail client does to a long line): each record is whole
    again on its first line, the lines its other pieces were on are empty, and the cause and the
    cited line are those of the log as printed."""
    log = XTABLES_LOG.read_text()
    folded = []
    for line in log.splitlines():
        folded += [line[i : i + width] for i in range(0, len(line), width)] or [""]
    p = tmp_path / "folded.log"
    p.write_text("\n".join(folded) + "\n")
    un = unwrap_paste(p.read_text())
    assert un.removed == ("hard line breaks",)
    assert [ln for ln in un.text.splitlines() if ln] == [ln for ln in log.splitlines() if ln]
    rep, _ = diagnose_paths([p])
    whole, _ = diagnose_paths([XTABLES_LOG])
    assert [f.cause for f in rep.findings] == [f.cause for f in whole.findings]
    lines = p.read_text().splitlines()
    for c in rep.findings[0].evidence:  # each cited line is where the record starts in the folded file
        assert c.line is not None and c.text[:20] in lines[c.line - 1]


def test_a_folded_log_indented_after_folding_is_joined_whole_before_any_message_is(tmp_path: Path) -> None:
    """A log folded at a terminal's width and then indented as a markdown block: the hard wrap is
    joined whole (every broken record), not only the records that hold a catalogue message."""
    log = XTABLES_LOG.read_text()
    folded = []
    for line in log.splitlines():
        folded += ["    " + line[i : i + 120] for i in range(0, len(line), 120)] or [""]
    p = tmp_path / "folded.md"
    p.write_text("\n".join(folded) + "\n")
    un = unwrap_paste(p.read_text())
    assert "hard line breaks" in un.removed and "line breaks inside a message" not in un.removed
    assert [ln for ln in un.text.splitlines() if ln] == [ln for ln in log.splitlines() if ln]


def test_a_line_as_wide_as_a_terminal_is_never_joined_to_the_fence_that_closes_its_block() -> None:
    # ipvsadm -Lnc's rows are often 80 characters: the last one used to take the "```" after it
    row = "TCP 01:57  FIN_WAIT    110.184.96.173:54568 122.225.32.142:80  122.225.32.136:80"
    assert len(row) == 80
    text = f"```\nIPVS connection entries\n{row}\n```\n"
    assert unwrap_paste(text).text == text


def test_a_line_that_is_a_program_message_of_its_own_is_not_a_wrapped_piece() -> None:
    """iptables-legacy-restore -w 1's stderr while another process holds XTABLES_LOCKFILE (run here
    with flock): its first line's length is the lock path's, 120 with this one, a terminal's
    width; the second line is iptables' own message, never that line's wrapped rest."""
    path = "/tmp/pytest-of-root/pytest-129/test_xtables_lock_held_by_anot0/xtables.lock"
    text = (
        f"Can't lock {path}: Resource temporarily unavailable\n"
        "Another app is currently holding the xtables lock. Stopped waiting after 1s.\n"
    )
    assert len(text.splitlines()[0]) == 120
    assert unwrap_paste(text).text == text


def test_a_padded_table_is_not_taken_for_a_wrapped_text() -> None:
    """ufw's numbered status pads its columns, so many rows end at the same column: rows, not a wrap."""
    table = (DATA / "node" / "ufw" / "status-numbered-pods.txt").read_text()
    assert "hard line breaks" not in unwrap_paste(table).removed


def _wrapped_at_every_word(text: str, start: int, end: int, indent: str = "") -> list[tuple[str, str]]:
    """Every way a word wrap can break ``text`` in two at a space between ``start`` and ``end``
    (the indent kept on both pieces)."""
    at = [i for i, ch in enumerate(text) if ch == " " and start < i < end]
    return [(indent + text[:i], indent + text[i + 1 :]) for i in at]


@pytest.mark.parametrize(
    "key", ["iptables/lock-held-no-wait", "iptables/lock-held-stopped-waiting", "kube-proxy/iptables-restore-failed"]
)
def test_a_message_broken_across_lines_by_a_word_wrap_is_read_whole_on_its_first_line(key: str) -> None:
    """An editor's or a tracker's word wrap breaks a message anywhere between its words (a
    caller's text before it, an indented quote): wherever it broke, the two lines are joined back
    onto the first, the second left empty, and the joined line reads as the message."""
    from kpdoctor.messages import catalogue as messages
    from kpdoctor.messages import matcher
    from kpdoctor.messages.templates import render

    caller = "could not set up pod iptables rules: "
    template = messages().get(key).template
    words = template.split("%")[0].split("{")[0].rstrip()  # its words, up to what varies
    line = caller + render(template)
    pieces = _wrapped_at_every_word(line, len(caller), len(caller) + len(words), indent="    ")
    assert len(pieces) >= 3
    for first, second in pieces:
        for above in ("", "- the Pod's events:\n\n"):  # alone, or indented under a list item
            un = unwrap_paste(f"{above}{first}\n{second}\n")
            got = un.text.split("\n")[above.count("\n") :]
            assert got[1] == "" and "line breaks inside a message" in un.removed, (above, first, second)
            assert any(m.message.key == key for m in matcher().match(got[0])), got[0]


def test_lines_are_not_joined_unless_a_message_is_broken_between_them() -> None:
    """Log records, rules and prose that hold no broken message keep their lines."""
    records = XTABLES_LOG.read_text()
    assert "line breaks inside a message" not in unwrap_paste(records).removed
    for text in (
        records,
        (DATA / "iptables" / "real" / "legacy-save.txt").read_text(),
        (DATA / "iptables" / "real" / "nft-L-nv.txt").read_text(),
        "Another app is\nrunning on this port, see the docs\n",
        # a broken message whose second piece starts a line of its own is a new record, not a piece
        "E1008 21:01:55.367127  145725 proxier.go:1285] Failed to execute\n"
        "I1008 21:01:55.367127  145725 proxier.go:1285] iptables-restore: exit status 1\n",
    ):
        assert "line breaks inside a message" not in unwrap_paste(text).removed, text[:60]


def test_log_lines_between_a_yamls_lines_are_read_apart(tmp_path: Path) -> None:
    """A Deployment's YAML (posted) with a CoreDNS log (posted) tailing into it, a line every
    fourth: the YAML is read as if alone, on its own line numbers, and the log lines apart."""
    yaml_text = (CASES / "k8s-43576" / "zero-downtime-test.yaml").read_text().splitlines()
    other = [ln for ln in (CASES / "coredns-2087" / "coredns.log").read_text().splitlines() if "[INFO]" in ln]
    mixed = []
    for i, ln in enumerate(yaml_text):
        mixed.append(ln)
        if i % 4 == 3:
            mixed.append(other[i % len(other)])
    p = tmp_path / "mixed.txt"
    p.write_text("\n".join(mixed) + "\n")
    alone, _ = diagnose_paths([CASES / "k8s-43576" / "zero-downtime-test.yaml"])
    rep, ev = diagnose_paths([p])
    assert [f.cause for f in rep.findings] == [f.cause for f in alone.findings] != []
    kinds = sorted(a.kind.value for a in ev.artifacts)
    assert "Kubernetes objects" in kinds
    (objects,) = [a for a in ev.artifacts if a.kind == Kind.K8S_OBJECTS]
    lines = objects.text.splitlines()
    assert all(not ln or ln in yaml_text for ln in lines) and len(lines) == len(mixed)


def test_notes_in_another_language_between_rules_are_left_out(tmp_path: Path) -> None:
    rules = (DATA / "iptables" / "real" / "legacy-S.txt").read_text().splitlines()
    noted = [*rules[:3], "# 这里开始报错", *rules[3:6], "// здесь ошибка", *rules[6:]]
    p = tmp_path / "rules.txt"
    p.write_text("\n".join(noted) + "\n")
    ev = load([p])
    (art,) = ev.artifacts
    assert art.kind == Kind.IPTABLES_RULES_S and "2 line(s) of headings, fences or notes left out" in art.attrs["part"]
    assert "здесь" not in art.text and art.text.split("\n")[3] == ""  # left out, line numbers kept
    assert "报错" not in art.text and art.text.splitlines()[6] == rules[5]


def test_grep_n_prefixes_and_separators_are_taken_off() -> None:
    log = XTABLES_LOG.read_text().splitlines()
    grepped = [f"{i}:{line}" for i, line in enumerate(log[:3], 10)] + ["--"] + [f"40-{log[3]}"]
    un = unwrap_paste("\n".join(grepped))
    assert un.removed == ("grep -n prefixes",)
    assert un.text.splitlines() == [*log[:3], "", log[3]]


def test_a_column_of_dates_is_not_taken_for_grep_line_numbers() -> None:
    calico = (CASES / "calico-6129" / "calico-node.log").read_text()
    assert unwrap_paste(calico).text == calico


def test_one_key_value_line_is_not_a_grep_prefix() -> None:
    assert unwrap_paste("`plugin/forward: no nameservers found`").text == "plugin/forward: no nameservers found"


# -- signals, not headers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case,file,cause",
    [
        ("microk8s-4961", "kube-proxy.log", "kernel-mark-target-regression"),  # headerless structured message
        ("vpc-cni-2948", "kube-proxy.log", "xtables-lock-held-too-long"),  # iptables stderr in CRI lines
        ("openshift-sdn-115", "pod-event.txt", "iptables-restore-no-wait"),  # another program's event, indented
        ("rke2-3710", "kube-proxy.log", "ipvs-prerequisites-missing"),
    ],
)
def test_a_registered_signature_makes_a_text_evidence_whatever_its_first_line(case: str, file: str, cause: str) -> None:
    path = CASES / case / file
    assert sniff(path.read_text(), catalogue()).kind is not None or unwrap_paste(path.read_text()).removed
    assert _causes(path)[:1] == [cause]


def test_generic_words_do_not_make_a_component_log_kube_proxys() -> None:
    """Only kube-proxy's generic FLAG lines (--bind-address is every component's flag): who wrote
    it cannot be told, so it is not read as kube-proxy's log (it was, on the word "FLAG: --")."""
    typed = sniff((CASES / "kubeadm-857" / "kube-proxy.log").read_text(), catalogue())
    assert typed.kind is None and "no kube-proxy lines" in typed.reason
    flags = 'I0728 02:09:00.385519       1 flags.go:27] FLAG: --proxy-mode="iptables"\n'
    assert sniff(flags, catalogue()).kind == Kind.KUBE_PROXY_LOG  # a flag only kube-proxy has


def test_typing_uses_the_signatures_it_is_given() -> None:
    """sniff types with the catalogue the entry points hand it (kpdoctor.knowledge): a caller
    that imported the checks gets every signature, whatever else it imported."""
    import subprocess
    import sys

    code = (
        "import sys, kpdoctor.checks\n"
        "from kpdoctor.bundle.sniff import sniff\n"
        "from kpdoctor.knowledge import catalogue\n"
        "print(sniff(open(sys.argv[1]).read(), catalogue()).kind)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(CASES / "microk8s-4961" / "kube-proxy.log")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(Kind.KUBE_PROXY_LOG)


# -- iptables fragments --------------------------------------------------------------------------


def test_a_single_grepped_rule_is_a_fragment_in_the_table_its_chain_shows() -> None:
    path = CASES / "k8s-112477" / "rule-before.txt"
    ev = load([path])
    (art,) = ev.artifacts
    assert art.kind == Kind.IPTABLES_SAVE and art.attrs["fragment"] == "true"
    (rs,) = Facts(ev).rulesets
    assert rs.form == "fragment" and [r.table for r in rs.all_rules()] == ["filter"]
    assert not any("outside any table" in d.message for d in rs.diagnostics)


def test_grepped_rules_of_a_transcript_go_to_the_table_the_command_named() -> None:
    """`iptables -t nat -S | grep KUBE-MARK-DROP`: the chain and its rule, in nat."""
    ev = load([CASES / "k8s-67398" / "iptables-S.txt"])
    rulesets = Facts(ev).rulesets
    nat = [r for rs in rulesets for r in rs.all_rules()]
    assert [(r.table, r.chain, r.line) for r in nat] == [("nat", "KUBE-MARK-DROP", 5)]


def test_rules_are_placed_by_target_when_the_chain_is_in_both_tables() -> None:
    from kpdoctor.parse.iptables import infer_table

    assert infer_table("KUBE-SERVICES", ("-d", "10.0.0.1/32", "-j", "KUBE-SVC-ABC")) == "nat"
    assert infer_table("KUBE-SERVICES", ("-d", "10.0.0.1/32", "-j", "REJECT")) == "filter"
    assert infer_table("KUBE-SERVICES", ("-j", "KUBE-NODEPORTS")) == "unknown"
    assert infer_table("FORWARD", ("-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP")) == "filter"


def test_a_list_with_line_numbers_is_read() -> None:
    ev = load([CASES / "k8s-39658" / "iptables-forward.txt"])
    (rs,) = Facts(ev).rulesets
    assert [r.target for r in rs.all_rules()][:3] == ["felix-FORWARD", "DOCKER-ISOLATION", "DOCKER"]


# -- transcripts ---------------------------------------------------------------------------------


def test_prompts_of_container_shells_glued_dollars_and_indented_sessions() -> None:
    text = (
        "  $kubectl -n kube-system get pods\n"
        "NAME READY\n"
        "/ # iptables -V\n"
        "iptables v1.8.7 (legacy)\n"
        "[root@node1 ~]# pgrep -laf kube-proxy\n"
        "8463 /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf --hostname-override=${NODE_NAME}\n"
    )
    parts = split_transcript(text)
    assert parts is not None
    assert [(p.command, p.first_line) for p in parts] == [
        ("kubectl -n kube-system get pods", 2),
        ("iptables -V", 4),
        ("pgrep -laf kube-proxy", 6),  # not a known command, but a real prompt: its own part
    ]


@pytest.mark.parametrize(
    "argv,scope",
    [
        ("docker run --rm registry.k8s.io/kube-proxy:v1.28.2 iptables --version", "kube-proxy"),
        ("kubectl -n kube-system exec kube-proxy-x7k2p -- iptables -V", "kube-proxy"),
        ("docker run --rm -it --entrypoint=/bin/sh gcr.io/google-containers/k8s-dns-node-cache:1.15.10", "container"),
        ("crictl exec 1f2e3d iptables-save", "container"),
    ],
)
def test_output_inside_a_container_is_not_the_hosts(argv: str, scope: str) -> None:
    assert hint_from_command(argv.split())["scope"] == scope


# A session typed in bash 5.2 (`script` of `bash -i`, its terminal codes taken off): a command
# continued after a backslash, and an awk program in quotes over three lines, each continuation
# line after bash's "> " prompt.
CONTINUED_SESSION = (
    "root@node1:~# sysctl net.ipv4.ip_forward \\\n"
    ">   net.ipv4.conf.all.rp_filter\n"
    "net.ipv4.ip_forward = 0\n"
    "net.ipv4.conf.all.rp_filter = 0\n"
    "root@node1:~# sysctl -a 2>/dev/null | awk '\n"
    "> /^net.ipv4.ip_forward / {print}\n"
    "> /^net.ipv4.conf.all.rp_filter / {print}'\n"
    "net.ipv4.conf.all.rp_filter = 0\n"
    "net.ipv4.ip_forward = 0\n"
)


def test_a_command_typed_over_several_lines_is_one_command(tmp_path: Path) -> None:
    """The lines the shell reads on (a backslash, an open quote) are the command's, not its output,
    and the continuation prompts are not a markdown quote; as bash read them."""
    parts = split_transcript(CONTINUED_SESSION)
    assert parts is not None
    assert [(p.argv, p.first_line) for p in parts] == [
        (["sysctl", "net.ipv4.ip_forward", "net.ipv4.conf.all.rp_filter"], 3),
        (["sysctl", "-a", "2>/dev/null", "|", "awk", "\n/^net.ipv4.ip_forward / {print}\n/^net.ipv4.conf.all.rp_filter / {print}"], 8),
    ]
    assert parts[0].text == "net.ipv4.ip_forward = 0\nnet.ipv4.conf.all.rp_filter = 0\n"
    rep, _ = diagnose_paths([write(tmp_path, "session.txt", CONTINUED_SESSION)])
    read = rep.to_json()["inputs"]
    assert [(i["lines"], i["kind"]) for i in read] == [([3, 4], "sysctl output"), ([8, 9], "sysctl output")]
    assert not any("paste" in i for i in read)  # nothing was taken for a markdown quote
    assert rep.visible()[0].cause == "ip-forward-disabled"


@pytest.mark.parametrize("first", ["for t in nat filter; do \\", "for t in nat filter; do"])
def test_a_loop_typed_over_several_lines_is_one_command(first: str) -> None:
    """bash reads a `for` loop on until its `done`: an `iptables` after the "> " prompt inside it
    is the loop's, not a command of its own (bash 5.2, as typed, with and without a backslash)."""
    text = (
        f"root@node1:~# {first}\n"
        "> iptables-legacy -t $t -S | head -2\n"
        "> done\n"
        "-P PREROUTING ACCEPT\n"
        "-P INPUT ACCEPT\n"
        "-P INPUT ACCEPT\n"
        "-P FORWARD ACCEPT\n"
    )
    parts = split_transcript(text)
    assert parts is not None and len(parts) == 1
    assert parts[0].first_line == 4 and parts[0].argv[0] == "for" and parts[0].argv[-1] == "done"
    assert parts[0].text.startswith("-P PREROUTING ACCEPT\n")
    assert unwrap_paste(text).removed == ()  # the "> " lines are the loop's, not a markdown quote


@pytest.mark.parametrize(
    "command",
    [
        "grep -c 'can't resolve /var/log/kube-proxy.log",  # a quote the shell would wait on forever
        "kubectl -n kube-system logs kube-proxy-x | grep do",  # "do" outside a loop opens nothing
    ],
)
def test_a_command_not_closed_within_its_lines_keeps_its_output(command: str) -> None:
    text = f"root@node1:~# {command}\n3\nroot@node1:~# iptables --version\niptables v1.8.7 (nf_tables)\n"
    parts = split_transcript(text)
    assert parts is not None
    assert [(p.text, p.first_line) for p in parts] == [("3\n", 2), ("iptables v1.8.7 (nf_tables)\n", 4)]


# -- how the evidence was read -------------------------------------------------------------------


def test_the_report_says_how_each_input_and_each_transcript_part_was_read() -> None:
    rep, _ = diagnose_paths([CASES / "k8s-67398" / "iptables-S.txt", CASES / "openshift-sdn-115" / "pod-event.txt"])
    inputs = rep.to_json()["inputs"]
    assert inputs[0] == {
        "source": str(CASES / "k8s-67398" / "iptables-S.txt"),
        "lines": [4, 5],
        "kind": "iptables-save output",
        "family": "IPv4",
        "command": "iptables -t nat -S | grep KUBE-MARK-DROP",
        "fragment": "rules without their table lines: proves what is in it, not what is not",
    }
    assert inputs[1]["kind"] == "log lines"
    assert inputs[1]["paste"] == "an indentation of 4, line breaks inside a message"


def test_json_is_written_when_nothing_could_be_read(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    p = tmp_path / "notes.txt"
    p.write_text("the service times out since the upgrade\n")
    res = subprocess.run(
        [sys.executable, "-m", "kpdoctor", "diagnose", "-f", "json", str(p)], capture_output=True, text=True
    )
    assert res.returncode == 2
    rep = json.loads(res.stdout)
    assert rep["checks_run"] == 0 and rep["input_problems"][0]["source"] == str(p)


# -- more shapes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case,file,kind",
    [
        ("k8s-92033", "kube-proxy.log", Kind.KUBE_PROXY_LOG),  # klog messages without their header
        ("k8s-3216", "kube-proxy.log", Kind.KUBE_PROXY_LOG),  # v0.x "watch channel" errors, indented
        ("k8s-77265", "kube-proxy.log", Kind.KUBE_PROXY_LOG),  # IPVS mode's ipset util
        ("k8s-93682", "iptables-L.txt", Kind.IPTABLES_LIST),  # -L rows grep'd without their headers
        ("k8s-80034", "ipvsadm.txt", Kind.IPVSADM),  # "\# ipvsadm -Ln | less", no column headers
        ("k3s-7183", "ipset-KUBE-IPVS-IPS.txt", Kind.IPSET),  # one set of `ipset list`
    ],
)
def test_more_real_shapes_are_read(case: str, file: str, kind: Kind) -> None:
    ev = load([CASES / case / file])
    assert [a.kind for a in ev.artifacts] == [kind], ev.problems


def test_rows_without_a_chain_header_keep_their_targets_and_comments() -> None:
    (rs,) = Facts(load([CASES / "k8s-93682" / "iptables-L.txt"])).rulesets
    rules = rs.all_rules()
    assert rules and all(r.target == "REJECT" for r in rules)
    assert "has no endpoints" in rules[0].text


def test_a_coredns_log_is_read_as_another_programs_log_lines_not_as_broken_json() -> None:
    """"[ERROR] plugin/errors: ..." opens with a bracket, and is CoreDNS's (the messages catalogue
    holds its lines): read for what its lines say, never reported as JSON that does not parse."""
    ev = load([CASES / "coredns-4211" / "coredns.log"])
    (a,) = ev.artifacts
    assert a.kind == Kind.KUBE_PROXY_LOG and a.attrs.get("fragment") == "true"
    assert not any("JSON" in p.message for p in ev.problems)


def test_a_table_kpdoctor_does_not_read_says_what_to_send(tmp_path: Path) -> None:
    """A Deployment table is not read: the objects are asked for. An Endpoints table is read,
    and a row cut at three addresses ("+ N more...") does not list the Service's endpoints."""
    table = tmp_path / "deploy.txt"
    table.write_text("NAME   READY   UP-TO-DATE   AVAILABLE   AGE\nweb    3/3     3            3           3d\n")
    ev = load([table])
    assert not ev.artifacts and "a kubectl table" in ev.problems[0].message and "-o yaml" in ev.problems[0].message
    endpoints = tmp_path / "ep.txt"
    endpoints.write_text("NAME         ENDPOINTS                                      AGE\n"
                         "web          10.244.1.5:8080,10.244.2.7:8080,10.244.3.2:8080 + 2 more...   3d\n")  # fmt: skip
    facts = Facts(load([endpoints]))
    assert [a.kind for a in facts.evidence.artifacts] == [Kind.KUBECTL_TABLE] and facts.listed_backends == {}


def test_a_whole_dump_too_big_for_the_head_is_not_a_fragment(tmp_path: Path) -> None:
    """Typing reads the first 256 kB: a 10,000-rule dump's COMMIT lies beyond it, and it is
    still the whole dump, verified as such (it was taken for a fragment, and verify refused)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import gen_cluster

    save, cluster = gen_cluster.write(tmp_path, 1000, 5)
    assert save.stat().st_size > 300_000
    ev = load([save])
    (art,) = ev.artifacts
    assert art.kind == Kind.IPTABLES_SAVE and "fragment" not in art.attrs
    rep, _ = diagnose_paths([save, cluster], command="verify")
    assert rep.verification is not None and rep.verification.services_checked == 1000


def test_lsb_release_tells_the_os_and_an_images_os_release_is_not_the_nodes(tmp_path: Path) -> None:
    facts = Facts(load([CASES / "k8s-82361" / "transcript.txt"]))
    assert facts.os_release is not None
    release, cite = facts.os_release
    assert release["ID"] == "debian" and cite.text.startswith("Description:")
    image = tmp_path / "session.txt"
    image.write_text(
        "$ docker run --rm registry.k8s.io/kube-proxy:v1.28.2 cat /etc/os-release\n"
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nID=debian\nVERSION_ID="12"\n'
    )
    assert Facts(load([image])).os_release is None


def test_a_quoted_session_whose_command_was_grep_n_is_read_as_the_log_it_printed(tmp_path: Path) -> None:
    log = XTABLES_LOG.read_text().splitlines()
    body = [f"{i}:{line}" for i, line in enumerate(log, 40)]
    pasted = ["  > $ kubectl -n kube-system logs kube-proxy-x7k2p | grep -n xtables", *(f"  > {b}" for b in body)]
    p = tmp_path / "comment.md"
    p.write_text("\n".join(pasted) + "\n")
    (art,) = load([p]).artifacts
    assert art.kind == Kind.KUBE_PROXY_LOG and "grep -n prefixes" in art.attrs["paste"]
    assert art.text.splitlines() == log and art.first_line == 2
    assert _causes(p) == _causes(XTABLES_LOG)


# -- counts, output before its command, elisions ---------------------------------------------------


def test_a_pasted_count_of_a_once_only_rule_is_the_duplicating_iptables(tmp_path: Path) -> None:
    """k/k#76431 as posted: one -L row, an elision, then the command that counted the rule on a
    Debian buster node (iptables-nft 1.8.2 printing its legacy-tables warning) and its count."""
    posted = (CASES / "k8s-76431" / "iptables-L.txt").read_text()
    ev = load([CASES / "k8s-76431" / "iptables-L.txt"])
    kinds = [(a.kind, a.first_line) for a in ev.artifacts]
    assert kinds == [(Kind.IPTABLES_LIST, 1), (Kind.LINE_COUNT, 4)]
    rep, _ = diagnose_paths([CASES / "k8s-76431" / "iptables-L.txt"])
    f = rep.findings[0]
    assert f.code == "KP122" and "4190 rules" in f.summary and "nf_tables" in f.summary
    assert f.evidence[0].line == 5 and f.evidence[0].text.endswith("->  4190")
    # the same pipeline counting one copy is a healthy node
    healthy = tmp_path / "count.txt"
    healthy.write_text(posted.replace("4190", "1"))
    assert "iptables-known-bug" not in _causes(healthy)


def test_two_counts_of_one_command_show_the_growth(tmp_path: Path) -> None:
    cmd = "# iptables -S | grep -c 'kubernetes firewall for dropping marked packets'\n"
    p = tmp_path / "counts.txt"
    p.write_text(f"{cmd}1200\n{cmd}1342\n")
    rep, _ = diagnose_paths([p])
    assert "1342 rules" in rep.findings[0].summary and "it was 1200 before" in rep.findings[0].summary


def test_a_count_of_other_rules_is_no_duplicate(tmp_path: Path) -> None:
    p = tmp_path / "counts.txt"
    p.write_text("$ iptables-save | grep KUBE-SEP | wc -l\n48213\n")
    ev = load([p])
    assert [a.kind for a in ev.artifacts] == [Kind.LINE_COUNT]
    assert "iptables-known-bug" not in _causes(p)


def test_output_before_the_first_prompt_is_its_own_part_not_lost() -> None:
    text = "Chain KUBE-FIREWALL (2 references)\n...\n$ iptables --version\niptables v1.8.2 (nf_tables)\n$ uname -r\n4.19.0-6-amd64\n"
    parts = split_transcript(text)
    assert parts is not None and [p.command for p in parts] == ["", "iptables --version", "uname -r"]
    assert parts[0].first_line == 1 and parts[0].text.startswith("Chain KUBE-FIREWALL")
    # one prompt after other lines is a transcript only when asked to be lenient
    assert split_transcript("-A KUBE-SERVICES -j RETURN\n# iptables -t nat -S KUBE-SERVICES\n-N X\n") is None


def test_elision_lines_do_not_count_against_a_fragment() -> None:
    row = (
        "    0     0 DROP       all  --  *      *       0.0.0.0/0            0.0.0.0/0            "
        "mark match 0x8000/0x8000 /* kubernetes firewall for dropping marked packets */\n"
    )
    for elision in ("...", "…", "[...]", "<snip>"):
        assert sniff(row + elision + "\n", catalogue()).kind == Kind.IPTABLES_LIST


def test_package_versions_as_rpm_and_dpkg_print_them() -> None:
    from kpdoctor.parse.system import parse_packages

    rpm = "ipvsadm-1.27-7.el7.x86_64\niptables-1.4.21-35.el7.x86_64\n"
    dpkg_s = (
        "Package: iptables\nStatus: install ok installed\nPriority: optional\nSection: net\n"
        "Installed-Size: 2588\nMaintainer: Debian Netfilter Packaging Team\nArchitecture: amd64\nVersion: 1.8.2-4\n"
    )
    dpkg_l = (
        "Desired=Unknown/Install/Remove/Purge/Hold\n"
        "| Status=Not/Inst/Conf-files/Unpacked/halF-conf/Half-inst/trig-aWait/Trig-pend\n"
        "|/ Err?=(none)/Reinst-required (Status,Err: uppercase=bad)\n"
        "||/ Name           Version      Architecture Description\n"
        "+++-==============-============-============-=================================\n"
        "ii  iptables       1.8.2-4      amd64        administration tools for packet filtering and NAT\n"
    )
    for text, want in (
        (rpm, [("ipvsadm", "7"), ("iptables", "7")]),
        (dpkg_s, [("iptables", None)]),
        (dpkg_l, [("iptables", None)]),
    ):
        assert sniff(text, catalogue()).kind == Kind.PACKAGES
        assert [(p.name, p.el) for p in parse_packages(text)] == want
    assert [p.version for p in parse_packages(dpkg_s + dpkg_l)] == ["1.8.2-4", "1.8.2-4"]


def test_process_tables_by_their_header_custom_columns_and_busybox() -> None:
    from kpdoctor.parse.system import parse_processes

    busybox = (  # `kubectl exec kube-proxy-x -- ps` in an Alpine/busybox image: PID 1 is what matters
        "PID   USER     TIME  COMMAND\n"
        "    1 root      0:12 /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf\n"
        "   27 root      0:00 ps\n"
    )
    custom = "  PID  PPID COMMAND\n 2812  2795 /usr/local/bin/kube-proxy --config=/var/lib/kube-proxy/config.conf\n"
    for text in (busybox, custom):
        assert sniff(text, catalogue()).kind == Kind.PROCESSES
    (first, _ps) = parse_processes(busybox, 10)
    assert (first.pid, first.ppid, first.user, first.program, first.line) == (1, None, "root", "kube-proxy", 11)
    (row,) = parse_processes(custom)
    assert (row.pid, row.ppid, row.program) == (2812, 2795, "kube-proxy")
    # a header that only looks like one (a column `ps` never prints) is not a process table
    assert sniff("PID NAME COMMAND\n1 x y\n", catalogue()).kind != Kind.PROCESSES


def test_lsof_network_rows_give_the_listeners() -> None:
    from kpdoctor.parse.sockets import parse_ss_listen

    rows = (
        "kube-prox  2812 root    9u  IPv6  31337      0t0  TCP *:10256 (LISTEN)\n"
        "kube-prox  2812 root   11u  IPv4  31340      0t0  TCP 10.0.0.5:43210->10.0.0.1:6443 (ESTABLISHED)\n"
        "coredns    4242 root    6u  IPv4  41000      0t0  UDP 10.244.1.3:53\n"
    )
    assert sniff(rows, catalogue()).kind == Kind.LISTENERS
    got = [(x.proto, x.address, x.port, x.process, x.pid, x.source) for x in parse_ss_listen(rows)]
    assert got == [
        ("tcp", "0.0.0.0", 10256, "kube-prox", 2812, "lsof"),
        ("udp", "10.244.1.3", 53, "coredns", 4242, "lsof"),
    ]


def test_command_told_shapes_lsmod_grep_and_dpkg_version(tmp_path: Path) -> None:
    """k/k#133694's `lsmod | grep ip` and k/k#82361's `dpkg -s iptables | grep ^Version`."""
    from kpdoctor.facts import Facts

    ev = load([CASES / "k8s-133694" / "lsmod.txt", CASES / "k8s-82361" / "transcript.txt"])
    mods = next(a for a in ev.artifacts if a.kind == Kind.MODULES)
    assert mods.attrs.get("fragment") == "true"
    facts = Facts(ev)
    assert "nf_nat" in facts.modules_seen and facts.modules is None  # a grep'd list proves no absence
    assert [(p.name, p.version) for p, _c in facts.packages] == [("iptables", "1.8.2-4")]


def test_nothing_printed_and_exit_are_not_unrecognised_content(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_text(
        "# ip6tables -t nat -S | grep KUBE-MARK-DROP\n(nothing)\n# iptables --version\niptables v1.8.4 (legacy)\n"
        "[root@pod /]# exit\ncommand terminated with exit code 1\n"
    )
    ev = load([p])
    assert [a.kind for a in ev.artifacts] == [Kind.IPTABLES_VERSION]
    assert [x.message for x in ev.problems] == [
        "output of `ip6tables -t nat -S | grep KUBE-MARK-DROP`: printed nothing (the placeholder says so): nothing "
        "matched"
    ]


def test_hostnamectl_and_neofetch_give_the_os_and_the_running_kernel(tmp_path: Path) -> None:
    from kpdoctor.facts import Facts

    hostnamectl = (
        "   Static hostname: node1\n         Icon name: computer-vm\n           Chassis: vm\n"
        "    Virtualization: kvm\n  Operating System: Debian GNU/Linux 10 (buster)\n"
        "            Kernel: Linux 4.19.0-18-amd64\n      Architecture: x86-64\n"
    )
    p = tmp_path / "hostnamectl.txt"
    p.write_text(hostnamectl)
    facts = Facts(load([p]))
    assert facts.kernel is not None and facts.kernel.value.base == (4, 19, 0) and facts.kernel.cite.line == 6
    assert facts.os_release is not None and facts.os_release[0]["VERSION_ID"] == "10"
    assert facts.os_release[0]["ID"] == "debian" and facts.os_release[1].line == 5
    neofetch = Facts(load([CASES / "k3d-607" / "host-info.txt"]))  # k3d#607 as posted
    assert neofetch.kernel is not None and neofetch.kernel.value.raw == "5.12.3-zen1-1-zen"


def test_a_dollar_prompt_starts_a_part_whatever_its_command(tmp_path: Path) -> None:
    """An indented markdown paste: a count run with sudo, then `hostnamectl` (a command kpdoctor
    did not know): its output must not be merged into the count's."""
    p = tmp_path / "comment.md"
    p.write_text(
        "Our Services broke after the upgrade:\n\n"
        "    $ sudo iptables --version\n    iptables v1.8.2 (nf_tables)\n"
        '    $ sudo iptables -S | grep -c "kubernetes firewall for dropping marked packets"\n    2814\n'
        "    $ some-tool --status\n    all good\n"
        "    $ hostnamectl\n      Operating System: Debian GNU/Linux 10 (buster)\n"
        "                Kernel: Linux 4.19.0-18-amd64\n"
    )
    ev = load([p])
    assert [a.kind for a in ev.artifacts] == [Kind.IPTABLES_VERSION, Kind.LINE_COUNT, Kind.OS_RELEASE]
    rep, _ = diagnose_paths([p])
    f = rep.findings[0]
    assert f.code == "KP122" and "2814 rules" in f.summary and f.confidence.label == "high"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet="ab1 \t:>-#[]", max_size=90),
            st.sampled_from(
                [
                    XTABLES_LOG.read_text().splitlines()[1][:80],
                    "    TCP  10.96.0.1:443 rr",
                    "> E1011 06:22:27.231396       1 proxier.go:732] x",
                    "# 这里开始报错",
                ]
            ),
        ),
        max_size=40,
    )
)
def test_unwrapping_a_paste_never_moves_a_line(lines: list[str]) -> None:
    """Whatever is taken off (wraps joined back) or read apart (parts of several kinds, notes and
    other logs), line N of the result is line N of the paste: evidence citations point into the
    user's own file."""
    text = "\n".join(lines)
    assert len(unwrap_paste(text).text.split("\n")) == len(text.split("\n"))
    seg = segment(text, catalogue())
    for part in seg.segments if seg is not None else ():
        for n, line in enumerate(part.text.split("\n")[:-1]):
            assert line in ("", lines[part.first_line - 1 + n])


@pytest.mark.parametrize(
    "prompt",
    [
        "web-7d9c4b8f6-x2kqz:~#",  # busybox ash's default prompt (\h:\w\$) in a Pod
        "node1:/etc/kubernetes#",
        "\u276f",  # zsh themes (pure, starship)
        "\u279c",  # oh-my-zsh's robbyrussell
        "tim@Tims-MBP kubernetes %",  # zsh's default (%n@%m %1~ %#), macOS's shell
    ],
)
def test_shell_prompts_of_other_shells_start_a_command(prompt: str) -> None:
    text = f"{prompt} iptables-save | grep KUBE-FIREWALL\n-A KUBE-FIREWALL -j DROP\n{prompt} uname -r\n5.10.0-21-amd64\n"
    parts = split_transcript(text)
    assert parts is not None and [p.argv[0] for p in parts] == ["iptables-save", "uname"]


def test_a_url_or_a_yaml_path_is_not_a_prompt() -> None:
    assert split_transcript("see https://github.com/kubernetes/kubernetes/issues/1 # here\n") is None
    assert split_transcript("kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\nmode: ipvs\n") is None


# -- output written as comments under its command (blog posts, runbooks) ---------------------------


@pytest.mark.parametrize(
    "post",
    [
        # the command, then its output in a comment with the writer's note after an arrow
        "sysctl net.ipv4.ip_forward\n# 输出：net.ipv4.ip_forward = 0  <-- 凶手找到了！\n",
        "$ sysctl net.ipv4.ip_forward\n# Output: net.ipv4.ip_forward = 0\n",
        "```bash\ncat /proc/sys/net/ipv4/ip_forward\n# => 0   # <- here\n```\n",
        # a label alone: the output is on the comment lines below it
        "# sysctl -a | grep forward\n# Output:\n# net.ipv4.ip_forward = 0\n# net.ipv4.conf.all.forwarding = 0\n",
    ],
)
def test_output_written_as_a_comment_under_its_command_is_read(tmp_path: Path, post: str) -> None:
    p = tmp_path / "post.md"
    p.write_text(post)
    setting = Facts(load([p])).node_state.setting("net.ipv4.ip_forward")
    assert setting is not None and setting.int() == 0
    assert setting.cite.line == len(post.rstrip("\n`").split("\n")) - (1 if "conf.all" in post else 0)
    assert "ip-forward-disabled" in _causes(p)


def test_commented_settings_of_a_sysctl_file_are_not_output() -> None:
    """A sysctl.conf's commented lines are settings switched off, not values read: only a comment
    labelled as output is taken off."""
    conf = "# Uncomment the next line to enable packet forwarding for IPv4\n#net.ipv4.ip_forward=1\n"
    assert unwrap_paste(conf).text == conf
    noted = "net.ipv4.ip_forward = 1\n# the value above is what sysctl --system left\n"
    assert unwrap_paste(noted).text == noted


def test_a_long_run_of_blank_lines_is_typed_in_linear_time() -> None:
    """A line-anchored shape that let its leading blanks cross lines (``^\\s*`` with re.M) tried
    every blank line of a run from every other: 20,000 blank lines inside an nft listing took 30 s
    to type (bench/fuzz.py's case 20261123:234)."""
    listing = (DATA / "nftables" / "layouts" / "gen-b-dnat-map" / "rules.nft").read_text().split("\n")
    text = "\n".join(listing[:115] + [""] * 20_000 + listing[115:])
    started = time.perf_counter()
    sniff(text, catalogue())
    assert time.perf_counter() - started < 3


def test_a_quoted_block_under_a_line_of_prose_is_read(tmp_path: Path) -> None:
    """A GitHub comment: a sentence, then the session quoted with `> `; the block is unquoted (a
    single `>` line is a remark or a redirect and is left as it is)."""
    text = (
        "and the bridge, as it is now:\n"
        "\n"
        "> root@node-3:~# bridge -d link show\n"
        "> 7: veth3f2a1b0c@if3: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1450 master cni0 state forwarding priority 32 cost 2\n"
        ">     hairpin off guard off root_block off fastleave off learning on flood on mcast_flood on bcast_flood on\n"
        "\n"
        "> thanks for looking\n"
        "The node runs flannel 0.9 from an old manifest.\n"
    )
    paste = tmp_path / "comment.md"
    paste.write_text(text)
    ev = load([paste])
    (a,) = [a for a in ev.artifacts if a.kind is Kind.IP_LINK]
    assert a.first_line == 4 and a.attrs.get("command") == "bridge -d link show"
    unwrapped = unwrap_paste(text)
    assert unwrapped.text.splitlines()[6] == "> thanks for looking"


def test_a_huge_line_with_an_open_quote_is_not_read_on_as_a_command() -> None:
    """A command longer than any a person types (16 KB) does not swallow the lines after it, and
    splitting stays linear in the text (the quote is not re-read for each of the next lines)."""
    big = "x" * 20000
    text = f"$ grep 'abc {big}\n{big}'\nroot@node1:~# iptables --version\niptables v1.8.7 (nf_tables)\n"
    parts = split_transcript(text)
    assert parts is not None and [p.first_line for p in parts] == [2, 4]
    assert parts[0].text == f"{big}'\n"


def test_a_prompt_glued_to_output_that_ended_without_a_newline_starts_its_command() -> None:
    """`curl -s localhost:10249/proxyMode` prints its word without a newline, and so do `printf`,
    `cat` of a file without one and `echo -n`: the next prompt follows on the same line."""
    text = (
        "[root@node01 ~]# curl -s localhost:10249/proxyMode\n"
        "ipvs[root@node01 ~]# sysctl net.ipv4.conf.all.arp_ignore\n"
        "net.ipv4.conf.all.arp_ignore = 0\n"
    )
    parts = split_transcript(text)
    assert parts is not None
    assert [(p.command, p.text.strip(), p.first_line) for p in parts] == [
        ("curl -s localhost:10249/proxyMode", "ipvs", 2),
        ("sysctl net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_ignore = 0", 3),
    ]
    # a `user@host:dir#` prompt glued to the word: the session's other prompts say where it starts
    text = (
        "root@node01:~# cat /proc/sys/net/ipv4/vs/conn_reuse_mode\n1\n"
        "root@node01:~# curl -s 127.0.0.1:10249/proxyMode\n"
        "iptablesroot@node01:~# uname -r\n"
        "5.4.0-150-generic\n"
    )
    parts = split_transcript(text)
    assert parts is not None
    assert [(p.command.split()[0], p.text.strip()) for p in parts] == [
        ("cat", "1"), ("curl", "iptables"), ("uname", "5.4.0-150-generic"),
    ]  # fmt: skip


def test_prompt_like_text_inside_output_lines_is_not_a_glued_prompt() -> None:
    text = (
        "[root@node01 ~]# journalctl -u sshd | tail -1\n"
        "Dec 01 10:00:00 node01 sshd[812]: banner [root@node01 ~]# text\n"
        "[root@node01 ~]# uname -r\n"
        "3.10.0-1160.el7.x86_64\n"
    )
    parts = split_transcript(text)
    assert parts is not None
    assert [p.command for p in parts] == ["journalctl -u sshd | tail -1", "uname -r"]
