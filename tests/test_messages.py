"""The messages catalogue: its schema is enforced, its templates read the lines the programs
print (real posted lines), a wrapper's payload is read by the payload's program's messages, and
every shipped entry reads its own example and its own rendering."""

from __future__ import annotations

import re

import pytest
from conftest import MISMATCH, SEED3_BLOCK

from kpdoctor.knowledge import CHECKS
from kpdoctor.messages import catalogue
from kpdoctor.messages.match import Matcher
from kpdoctor.messages.schema import CatalogueError, load
from kpdoctor.messages.templates import TemplateError, compile_template, render
from kpdoctor.messages.templates import captures as captures_of

KUBE_PROXY = """\
component: kube-proxy
sources: ["test"]
entries:
  - id: restore-failed
    template: "Failed to execute iptables-restore: %v"
    structured: {msg: "Failed to execute iptables-restore", keys: [err]}
    level: E
    payload: iptables
    class: symptom
    suggests: [rule-sync-stale]
    meaning: "A sync's iptables-restore failed; its output says why."
"""
IPTABLES = """\
component: iptables
sources: ["test"]
entries:
  - id: couldnt-load-target
    template: "Couldn't load target `{target}':{reason}"
    class: symptom
    suggests: [iptables-backend-mismatch]
    meaning: "A target extension or chain could not be loaded."
  - id: unknown-option
    template: 'unknown option "{option}"'
    class: symptom
    suggests: [kernel-mark-target-regression]
    meaning: "The binary or the kernel does not know an option of a rule."
"""


def matcher() -> Matcher:
    return Matcher(load([("kube-proxy.yaml", KUBE_PROXY), ("iptables.yaml", IPTABLES)]))


def test_a_glog_wrapper_line_is_read_with_its_payload() -> None:
    [m, *_] = matcher().match(MISMATCH)
    assert m.message.key == "kube-proxy/restore-failed"
    assert m.payload is not None and m.payload.message.key == "iptables/couldnt-load-target"
    assert m.payload.captures["target"] == "KUBE-MARK-DROP"
    assert m.kind == "symptom" and m.payload.message.suggests == ("iptables-backend-mismatch",)


def test_a_structured_record_is_read_by_its_message_and_payload() -> None:
    record = "\n".join(SEED3_BLOCK.splitlines()[1:5])  # the E line and its err=< block
    [m, *_] = matcher().match(record)
    assert m.message.key == "kube-proxy/restore-failed"
    assert m.payload is not None and m.payload.message.key == "iptables/unknown-option"
    assert m.payload.captures["option"] == "--xor-mark"


def test_of_two_wrappers_that_start_alike_the_one_that_reads_its_payload_comes_first() -> None:
    """kube-proxy's "error checking rule: %v" and "error checking rule: %v: %s" both read a line
    whose payload has a colon of its own: the reading that knows the payload is the answer."""
    from kpdoctor.messages import matcher as shipped

    [m, *_] = shipped().match("error checking rule: iptables: Index of insertion too big.")
    assert m.message.key == "kube-proxy/util-iptables-check-rule-save-error"
    assert m.payload is not None and m.payload.message.key == "iptables/index-too-big"
    # with the exit status first, as -C failures print it, the two-part form reads it
    [m, *_] = shipped().match("error checking rule: exit status 1: iptables: Index of insertion too big.")
    assert m.payload is not None and m.payload.message.key == "iptables/index-too-big"


def test_a_line_no_message_knows_is_nothing() -> None:
    assert matcher().match('I1113 16:15:07.931317 1 proxier.go:820] "SyncProxyRules complete"') == []


@pytest.mark.parametrize(
    ("template", "line", "captures"),
    [
        (
            "IPVS: rr: {protocol} {address}:{port} - no destination available",
            "IPVS: rr: TCP 10.96.0.1:443 - no destination available",
            {"protocol": "TCP", "address": "10.96.0.1", "port": "443"},
        ),
        ("nf_conntrack: table full, dropping packet", "[ 123.4] nf_conntrack: table full, dropping packet", {}),
        (
            "Possible SYN flooding on port {port}. {action}. Check SNMP counters.",
            "TCP: request_sock_TCP: Possible SYN flooding on port 8080. Dropping request.  Check SNMP counters.",
            {"port": "8080", "action": "Dropping request"},
        ),
        (
            "Error syncing load balancer: failed %s: %v",
            "Error syncing load balancer: failed ensure: boom",
            {"value": "ensure", "value_2": "boom"},
        ),
        ("literal {{braces}} and %d%%", "literal {braces} and 42%", {"number": "42"}),
        # an address masked before posting is still an address: the message is the same
        (
            "IPVS: rr: {protocol} {address}:{port} - no destination available",
            "IPVS: rr: TCP 10.x.x.x:443 - no destination available",
            {"protocol": "TCP", "address": "10.x.x.x", "port": "443"},
        ),
        (
            "Failed to retrieve node IP: {address} x",
            "Failed to retrieve node IP: <redacted> x",
            {"address": "<redacted>"},
        ),
        (
            "node {node} has address {ip}",
            "node ip-10-0-1-2 has address [NODE_IP]",
            {"node": "ip-10-0-1-2", "ip": "[NODE_IP]"},
        ),
    ],
)
def test_templates_read_real_lines(template: str, line: str, captures: dict[str, str]) -> None:
    compiled = compile_template(template)
    got = compiled.regex().search(line)
    assert got is not None and captures_of(compiled, got) == captures
    assert compile_template(template).regex().search(render(template)) is not None


@pytest.mark.parametrize("template", ["{port}", "%v: %s", "a {b", "a } b"])
def test_a_template_that_would_match_anything_or_does_not_close_is_refused(template: str) -> None:
    with pytest.raises(TemplateError):
        compile_template(template)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("component: x\nentries: []\n", "entries is a non-empty list"),
        ("component: x\nentries:\n  - {id: a, template: text, class: cause, meaning: m}\n", "names its cause"),
        ("component: x\nentries:\n  - {id: a, template: text, class: bad, meaning: m}\n", "class 'bad'"),
        (
            "component: x\nentries:\n  - {id: a, template: text, class: benign, meaning: m, colour: red}\n",
            "unknown field(s) colour",
        ),
        ("component: x\nentries:\n  - {id: A_b, template: text, class: benign, meaning: m}\n", "not kebab-case"),
        (
            "component: x\nentries:\n  - {id: a, template: 'x {', class: benign, meaning: m}\n",
            "template: an unbalanced brace",
        ),
        (
            "component: x\nentries:\n  - {id: a, template: one, class: benign, meaning: m}\n  - {id: a, template: two, class: benign, meaning: m}\n",
            "id a twice",
        ),
    ],
)
def test_a_file_that_breaks_the_schema_is_refused_saying_where(text: str, said: str) -> None:
    with pytest.raises(CatalogueError, match=r"^x\.yaml") as err:
        load([("x.yaml", text)])
    assert said in str(err.value)


def test_the_shipped_catalogue_loads_and_names_only_known_causes() -> None:
    cat = catalogue()
    assert len(cat) > 0
    known = {spec.cause for spec in CHECKS.values()}
    unknown = sorted(
        {(m.key, slug) for m in cat for slug in ([m.cause] if m.cause else []) + list(m.suggests) if slug not in known}
    )
    assert unknown == [], f"cause slugs no check has: {unknown}"


def test_every_shipped_entry_reads_its_own_example_and_rendering() -> None:
    every = Matcher(catalogue())
    wrong = []
    for m in catalogue():
        for line in [render(m.template)] + ([m.example] if m.example else []):
            if m.key not in {x.message.key for x in every.match(line, m.component)}:
                wrong.append((m.key, line))
    assert wrong == []


def test_an_address_a_program_prints_as_it_is_is_read_masked_too() -> None:
    """kube-proxy's "127.0.0.1" fallback is part of its message: a post that masks addresses
    ("127.x.x.x", "x.x.x.x") still holds that message."""
    every = Matcher(catalogue())
    literal = [m for m in catalogue() if m.example and re.search(r"\b\d+\.\d+\.\d+\.\d+\b", m.template)]
    assert literal
    for m in literal:
        for masked in (
            re.sub(r"\b(\d+)\.\d+\.\d+\.\d+\b", r"\1.x.x.x", m.example or ""),
            re.sub(r"\b\d+\.\d+\.\d+\.\d+\b", "x.x.x.x", m.example or ""),
        ):
            assert m.key in {x.message.key for x in every.match(masked, m.component)}, masked


def test_docs_messages_md_is_generated_from_the_data() -> None:
    from pathlib import Path

    from kpdoctor.messages.__main__ import render as render_doc

    doc = Path(__file__).resolve().parents[1] / "docs" / "messages.md"
    assert doc.read_text() == render_doc(catalogue()), "regenerate: python -m kpdoctor.messages > docs/messages.md"


def test_the_shipped_data_file_is_the_yaml_files_data() -> None:
    """Every run reads the catalogue from its data file (a JSON copy of the YAML, 30 times
    faster to read): it must be made from the YAML files as they are, and read to the same
    catalogue; a data file made from other texts is not read."""
    from kpdoctor.messages import schema

    files = schema.shipped_files()
    data = schema._shipped_data(files)
    assert data is not None, "regenerate: python -m kpdoctor.messages --write-data"
    assert schema.load() == schema.load(files)
    edited = [(name, text + "\n# edited\n") for name, text in files]
    assert schema._shipped_data(edited) is None


# A check reads a message the catalogue holds through the catalogue (knowledge.messages), never a
# regular expression of its own. What still holds one, and why (this list only shrinks):
STILL_HAND_WRITTEN: dict[str, str] = {}


def test_no_check_holds_a_regex_for_a_message_the_catalogue_has() -> None:
    import kpdoctor.checks  # noqa: F401 - declares the signatures
    from kpdoctor.knowledge import REGISTRY

    lines = []
    for m in catalogue():
        lines.append((m.key, render(m.template)))
        if m.structured is not None:
            lines.append((m.key, f'"{m.structured.msg}" err="x"'))
    holding = {}
    for sid, sig in REGISTRY.items():
        rx = sig.compiled()
        read = sorted({k for k, line in lines if sig.needle in line and rx.search(line)})
        if read:
            holding[sid] = read
    assert set(holding) <= set(STILL_HAND_WRITTEN), {k: v for k, v in holding.items() if k not in STILL_HAND_WRITTEN}


def test_a_check_cannot_read_a_message_the_catalogue_does_not_hold() -> None:
    import kpdoctor.checks  # noqa: F401 - declares what the checks read
    from kpdoctor.knowledge import DECLARED, Messages

    for declared in DECLARED:
        assert declared.ids, declared  # each key resolves to its forms
    with pytest.raises(ValueError, match="not in the messages catalogue"):
        _ = Messages("nowhere", ("kube-proxy/no-such-message",)).ids


def test_a_message_read_by_a_check_is_scanned_with_its_flags_and_kept_apart_by_value() -> None:
    import kpdoctor.checks  # noqa: F401
    from kpdoctor.checks.sync.cluster_cidr import CIDR_WRONG_FAMILY
    from kpdoctor.knowledge import catalogue as signatures

    by_id = {s.id: s for s in signatures()}
    read = [by_id[i] for i in CIDR_WRONG_FAMILY.ids]
    assert read and all(s.failure and s.keyed for s in read)
    unread = by_id["kube-proxy/nftables-sync-failed"]
    assert not unread.keyed  # its payload varies on every line: not a variant to keep
