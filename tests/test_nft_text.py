"""``nft list ruleset`` text -> ``nft -j list ruleset`` objects (kpdoctor.parse.nft_text).

The oracle is real nft 1.0.6 output: every pair under ``data/nftables/pairs`` (see SOURCES.md
there; ``capture.sh`` regenerates them) and the upstream kube-proxy pairs under
``data/upstream/nftables`` was printed by the same kernel ruleset in both forms, and the converter
must turn the text into exactly the JSON objects, in nft -j's order.
"""

from __future__ import annotations

import copy
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lab.netns import Netns, list_netns, nft_unavailable

from kpdoctor.parse.nft_text import text_to_objects

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import gen_cluster  # type: ignore[import-not-found]

DATA = Path(__file__).resolve().parent / "data"
PAIRS_DIR = DATA / "nftables" / "pairs"
UPSTREAM_DIR = DATA / "upstream" / "nftables"

CAPTURED = [
    "kube_proxy_gen_b",
    "kube_proxy_gen_c",
    "kube_proxy_ipv6",
    "firewalld",
    "calico_like",
    "docker_xt",
    "kube_proxy_iptables_xt",
    "typeof_and_flags",
    "zoo",
]
UPSTREAM = ["TestOverallNFTablesRules", "TestSyncProxyRulesRepeated_svc3TwoEndpoints"]
PAIRS: dict[str, tuple[Path, Path]] = {
    **{n: (PAIRS_DIR / f"{n}.txt", PAIRS_DIR / f"{n}.json") for n in CAPTURED},
    **{n: (UPSTREAM_DIR / f"{n}.ruleset.txt", UPSTREAM_DIR / f"{n}.ruleset.json") for n in UPSTREAM},
}
XT_PAIRS = {"docker_xt", "kube_proxy_iptables_xt"}


def real_objects(path: Path) -> list[dict[str, Any]]:
    """What nft -j printed, without metainfo and without the handle of each object."""
    out = []
    for obj in json.loads(path.read_text())["nftables"]:
        kind, body = next(iter(obj.items()))
        if kind == "metainfo":
            continue
        out.append({kind: {k: v for k, v in body.items() if k != "handle"}})
    return out


def without_added(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop the keys kpdoctor adds ("line" on objects, "text" on rules)."""
    out = []
    for obj in objs:
        kind, body = next(iter(obj.items()))
        out.append({kind: {k: v for k, v in body.items() if k not in ("line", "text")}})
    return out


def split_expires(value: Any, found: list[int]) -> Any:
    """Element ``expires`` is a countdown read when each listing ran: pull it out for a tolerant check."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "expires" and isinstance(v, int):
                found.append(v)
            else:
                out[k] = split_expires(v, found)
        return out
    if isinstance(value, list):
        return [split_expires(v, found) for v in value]
    return value


def assert_same(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    got_exp: list[int] = []
    want_exp: list[int] = []
    got_n = split_expires(without_added(got), got_exp)
    want_n = split_expires(want, want_exp)
    assert len(got_exp) == len(want_exp)
    assert all(abs(a - b) <= 2 for a, b in zip(got_exp, want_exp, strict=True)), (got_exp, want_exp)
    for i, (g, w) in enumerate(zip(got_n, want_n, strict=False)):
        assert g == w, f"object {i} differs:\n got  {json.dumps(g)}\n want {json.dumps(w)}"
    assert len(got_n) == len(want_n)


def convert(text: str, **kw: Any) -> list[dict[str, Any]]:
    return text_to_objects(text, **kw)


def rules(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o["rule"] for o in objs if "rule" in o]


def one_rule(body: str, family: str = "ip", table: str = "t") -> dict[str, Any]:
    objs = convert(f"table {family} {table} {{\n\tchain c {{\n\t\t{body}\n\t}}\n}}\n")
    (rule,) = rules(objs)
    return rule


# --- the real pairs -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_pair_converts_to_the_json_nft_printed(name: str) -> None:
    txt, js = PAIRS[name]
    assert_same(convert(txt.read_text()), real_objects(js))


def test_pairs_cover_what_kube_proxy_and_host_firewalls_use() -> None:
    """Guard against a capture silently losing the constructs the pair test is meant to prove."""
    blob = "\n".join(PAIRS[n][1].read_text() for n in PAIRS)
    for needle in (
        '"numgen"',  # numgen vmap / dnat map
        '"dnat": {"family": "ip6"',
        '"dnat": {"family": "ip", "addr": {"map"',
        '"@hairpin-connections"',
        '"comment": "ns2/svc2:p80"',  # element comment
        '"expires"',
        '"flags": ["timeout"]',
        '{"xt": {"type": "match", "name": "comment"}}',
        '{"xt": {"type": "match", "name": "statistic"}}',
        '{"xt": {"type": "target", "name": "DNAT"}}',
        '"reject": {"type": "icmpx", "expr": "admin-prohibited"}',
        '"op": "in"',
        '"fib"',
        '"prio": -110',
        '"prio": -200',  # bridge "filter"
        '{"|": [{"meta": {"key": "mark"}}, 16384]}',
    ):
        assert needle in blob, needle


def test_chain_listing() -> None:
    """``nft list chain`` text still names its table; ``nft -j list chain`` prints no table object."""
    got = [o for o in convert((PAIRS_DIR / "kube_proxy_gen_b.chain.txt").read_text()) if "table" not in o]
    assert_same(got, real_objects(PAIRS_DIR / "kube_proxy_gen_b.chain.json"))


def test_handles_listing_converts_like_the_plain_one() -> None:
    """``nft -a`` appends ``# handle N`` to tables, sets, chains and rules."""
    plain = convert((PAIRS_DIR / "kube_proxy_gen_b.txt").read_text())
    handles = (PAIRS_DIR / "kube_proxy_gen_b.handles.txt").read_text()
    assert "# handle" in handles
    assert without_added(convert(handles)) == without_added(plain)


def test_iptables_nft_tables_convert_without_the_warning_line() -> None:
    """The warning goes to stderr and is often missing from a paste; iptables' own base chains
    (and the translations only xtables prints) still identify the tables."""
    for name in XT_PAIRS:
        txt, js = PAIRS[name]
        text = "\n".join(line for line in txt.read_text().splitlines() if not line.startswith("# Warning"))
        assert "Warning" not in text
        assert_same(convert(text), real_objects(js))


def test_hand_written_nat_table_stays_native() -> None:
    text = """table ip nat {
\tchain postrouting {
\t\ttype nat hook postrouting priority srcnat; policy accept;
\t\toifname "eth0" masquerade
\t}
}
"""
    assert rules(convert(text))[0]["expr"][-1] == {"masquerade": None}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_crlf_and_space_indentation_convert_alike(name: str) -> None:
    text = PAIRS[name][0].read_text()
    want = without_added(convert(text))
    assert without_added(convert(text.replace("\n", "\r\n"))) == want
    spaced = re.sub(r"^\t+", lambda m: "    " * len(m.group()), text, flags=re.M).replace("\t", "    ")
    got = without_added(convert(spaced))
    if name != "kube_proxy_iptables_xt":
        assert got == want
    else:  # a comment match first in a rule leaves a leading space, lost with the tabs (documented)
        diff = [(g, w) for g, w in zip(got, want, strict=True) if g != w]
        assert len(diff) == 3
        for g, w in diff:
            assert w["rule"]["expr"][0] == {"xt": {"type": "match", "name": "comment"}}
            assert g["rule"]["expr"] == w["rule"]["expr"][1:]


# --- lines and texts ----------------------------------------------------------------------------


def drop_counter(line: str) -> str:
    return re.sub(r"\s*counter packets \d+ bytes \d+\s*", " ", line).strip()


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_lines_point_at_the_listing(name: str) -> None:
    text = PAIRS[name][0].read_text()
    lines = text.splitlines()
    objs = convert(text)
    assert objs
    for obj in objs:
        kind, body = next(iter(obj.items()))
        src = re.sub(r"\s*# handle \d+$", "", lines[body["line"] - 1]).strip()
        if kind == "table":
            assert src == f"table {body['family']} {body['name']} {{"
        elif kind in ("chain", "set", "map"):
            assert src == f"{kind} {body['name']} {{"
        elif kind == "rule":
            assert body["text"] == drop_counter(src)
            assert "counter packets" not in body["text"]
        else:
            assert src.startswith(f"{kind} {body['name']}")


def test_first_line_offsets_every_line() -> None:
    text = PAIRS["firewalld"][0].read_text()
    base = convert(text)
    shifted = convert(text, first_line=101)
    assert [next(iter(o.values()))["line"] + 100 for o in base] == [next(iter(o.values()))["line"] for o in shifted]


def test_rule_text_keeps_everything_but_the_counter() -> None:
    rule = one_rule('iifname "docker0" counter packets 12 bytes 3400 return comment "x counter packets 1 bytes 2"')
    assert rule["text"] == 'iifname "docker0" return comment "x counter packets 1 bytes 2"'
    assert rule["comment"] == "x counter packets 1 bytes 2"
    assert rule["expr"][1] == {"counter": {"packets": 12, "bytes": 3400}}
    assert one_rule("counter packets 0 bytes 0 jump X")["text"] == "jump X"


def test_objects_come_in_nft_json_order() -> None:
    """Table, then sets/maps in listing order, then every chain, then the rules chain by chain."""
    text = """table inet t {
\tchain b {
\t\tjump a
\t}

\tset s {
\t\ttype ipv4_addr
\t}

\tchain a {
\t\taccept
\t\tdrop
\t}
}
"""
    objs = convert(text)
    assert [(k, v.get("name", v.get("chain"))) for o in objs for k, v in o.items()] == [
        ("table", "t"),
        ("set", "s"),
        ("chain", "b"),
        ("chain", "a"),
        ("rule", "b"),
        ("rule", "a"),
        ("rule", "a"),
    ]
    assert [r["line"] for r in rules(objs)] == [3, 11, 12]
    assert [r["expr"] for r in rules(objs)][1:] == [[{"accept": None}], [{"drop": None}]]


# --- unknown and robustness ---------------------------------------------------------------------


def test_invented_statement_becomes_unknown_and_the_rest_is_kept() -> None:
    rule = one_rule("ip daddr 1.2.3.4 frobnicate 42 accept")
    assert rule["expr"] == [
        {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "1.2.3.4"}},
        {"unknown": "frobnicate 42"},
        {"accept": None},
    ]
    assert one_rule("frobnicate")["expr"] == [{"unknown": "frobnicate"}]
    assert one_rule("tcp dport 80 wibble { 1, 2 } counter packets 1 bytes 2 drop")["expr"][1:] == [
        {"unknown": "wibble { 1, 2 }"},
        {"counter": {"packets": 1, "bytes": 2}},
        {"drop": None},
    ]


def test_rare_statements_are_unknown_not_guessed() -> None:
    assert one_rule("queue num 3 bypass")["expr"] == [{"unknown": "queue num 3 bypass"}]
    assert one_rule("dup to 1.2.3.4 device eth0")["expr"][0] == {"unknown": "dup to 1.2.3.4 device eth0"}


def test_lines_outside_tables_are_ignored() -> None:
    text = (
        "$ sudo nft list ruleset\nip daddr 1.2.3.4 drop\n}\n" + PAIRS["kube_proxy_gen_c"][0].read_text() + "\n$ exit\n"
    )
    assert_same(convert(text), real_objects(PAIRS["kube_proxy_gen_c"][1]))
    assert convert("chain c {\n\taccept\n}\n") == []


def test_truncated_listing_keeps_what_was_complete() -> None:
    text = PAIRS["kube_proxy_gen_b"][0].read_text()
    full = convert(text)
    cut = text[: text.index("chain services {")]
    part = convert(cut)
    assert part and part[0] == full[0]
    heads = [o for o in full if "set" in o or "map" in o]
    assert [o for o in part if "set" in o or "map" in o] == heads
    assert not any("rule" in o and o["rule"]["chain"] == "services" for o in part)


def test_rule_wrapped_over_lines_is_one_rule_at_its_first_line() -> None:
    text = "table ip t {\n\tchain c {\n\t\tip daddr { 1.1.1.1,\n\t\t\t2.2.2.2 } accept\n\t\tdrop\n\t}\n}\n"
    first, second = rules(convert(text))
    assert first["line"] == 3 and second["line"] == 5
    assert first["expr"][0]["match"]["right"] == {"set": ["1.1.1.1", "2.2.2.2"]}
    assert first["text"] == "ip daddr { 1.1.1.1, 2.2.2.2 } accept"


def test_a_lost_closing_brace_does_not_swallow_the_next_chain() -> None:
    text = "table ip t {\n\tchain a {\n\t\taccept\n\tchain b {\n\t\tdrop\n\t}\n}\n"
    objs = convert(text)
    assert [(r["chain"], r["expr"]) for r in rules(objs)] == [("a", [{"accept": None}]), ("b", [{"drop": None}])]


def mutate(text: str, rnd: random.Random) -> str:
    kind = rnd.randrange(6)
    lines = text.splitlines()
    if kind == 0:
        return text[: rnd.randrange(len(text) + 1)]
    if kind == 1:
        rnd.shuffle(lines)
        return "\n".join(lines)
    if kind == 2:
        chars = list(text)
        for _ in range(rnd.randrange(1, 40)):
            chars.insert(rnd.randrange(len(chars) + 1), rnd.choice('{}[]()",;:.-/@#!=<>|&^ \t\n\r\x00é0xz'))
        return "".join(chars)
    if kind == 3:
        for _ in range(rnd.randrange(1, 20)):
            i = rnd.randrange(len(lines))
            words = lines[i].split(" ")
            rnd.shuffle(words)
            lines[i] = " ".join(words)
        return "\n".join(lines)
    if kind == 4:
        i = rnd.randrange(len(lines))
        return "\n".join([*lines[:i], rnd.choice(["{" * 5000, "ip daddr { " * 3000, "frob " * 5000]), *lines[i:]])
    return "\n".join(line[: rnd.randrange(len(line) + 1)] for line in lines)


def test_never_raises_on_mutated_listings() -> None:
    rnd = random.Random(20261127)
    texts = [p[0].read_text() for p in PAIRS.values()]
    start = time.perf_counter()
    for _ in range(600):
        out = convert(mutate(rnd.choice(texts), rnd))
        assert isinstance(out, list)
        for obj in out:
            kind, body = next(iter(obj.items()))
            assert isinstance(body["line"], int)
            if kind == "rule":
                assert isinstance(body["text"], str) and isinstance(body["expr"], list)
    assert time.perf_counter() - start < 60


VOCAB = [
    "table ip t {", "table inet f {", "chain c {", "set s {", "map m {", "}", "{", "elements = {",
    "type ipv4_addr . inet_service : verdict", "flags interval,timeout", "timeout 3h", "ip daddr",
    "@s", "vmap", "{ 0 : goto a, 1 : jump b }", "dnat ip to", "numgen random mod 2 map", "ct state",
    "new,established", "!=", "meta mark & 0x4000 == 0", "counter packets 1 bytes 2", "comment \"x",
    "# Warning: table ip nat is managed by iptables-nft, do not touch!", "xt match", "  ", "\t\t ",
    "10.0.0.0/8", "1-2", "[fd00::1]:80", "expires 1h2m3s4ms", ":", ".", ",", "reject with", "log prefix",
    "limit rate over", "tcp flags syn / syn,ack", "fib daddr . iif type", "update @s {", "type filter hook",
    "priority dstnat - 10; policy accept;", "\r", "é", "\x00",
]  # fmt: skip


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.one_of(st.text(max_size=400), st.lists(st.sampled_from(VOCAB), max_size=60).map(" ".join)))
def test_never_raises_on_arbitrary_text(text: str) -> None:
    out = convert(text)
    assert isinstance(out, list)
    out2 = convert(text.replace(" ", "\n"))
    assert isinstance(out2, list)


# --- specific conversions (expected values copied from the captured nft -j output) -----------


def test_priorities_by_name_and_family() -> None:
    text = """table ip t {
\tchain a {
\t\ttype filter hook prerouting priority dstnat - 10; policy accept;
\t}
\tchain b {
\t\ttype filter hook forward priority filter + 5; policy drop;
\t}
\tchain c {
\t\ttype filter hook input priority -110; policy accept;
\t}
}
table bridge br {
\tchain f {
\t\ttype filter hook forward priority filter; policy accept;
\t}
}
table netdev n {
\tchain i {
\t\ttype filter hook ingress devices = { lo, v1 } priority filter; policy accept;
\t}
}
"""
    chains = [o["chain"] for o in convert(text) if "chain" in o]
    assert [(c["name"], c["prio"], c["policy"]) for c in chains] == [
        ("a", -110, "accept"),
        ("b", 5, "drop"),
        ("c", -110, "accept"),
        ("f", -200, "accept"),
        ("i", 0, "accept"),
    ]
    assert "dev" not in chains[-1]  # nft 1.0.6 prints no "dev" in chain JSON


@pytest.mark.parametrize(
    ("family", "want"),
    [
        ("ip", {"type": "icmp", "expr": "port-unreachable"}),
        ("ip6", {"type": "icmpv6", "expr": "port-unreachable"}),
        ("inet", {"type": "icmpx", "expr": "port-unreachable"}),
    ],
)
def test_bare_reject_depends_on_the_family(family: str, want: dict[str, str]) -> None:
    assert one_rule("reject", family=family)["expr"] == [{"reject": want}]


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ("ct state new", {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "new"}}),
        (
            "ct state established,related",
            {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}},
        ),
        (
            "ct state { established, related }",
            {"match": {"op": "==", "left": {"ct": {"key": "state"}}, "right": {"set": ["established", "related"]}}},
        ),
        (
            "meta mark & 0x00004000 == 0x00000000",
            {"match": {"op": "==", "left": {"&": [{"meta": {"key": "mark"}}, 16384]}, "right": 0}},
        ),
        (
            "tcp flags syn / syn,ack",
            {
                "match": {
                    "op": "==",
                    "left": {"&": [{"payload": {"protocol": "tcp", "field": "flags"}}, ["syn", "ack"]]},
                    "right": "syn",
                }
            },
        ),
        (
            "fib daddr . iif type != local",
            {"match": {"op": "!=", "left": {"fib": {"result": "type", "flags": ["daddr", "iif"]}}, "right": "local"}},
        ),
        (
            "ip saddr != { 198.51.100.0/24, 203.0.113.0/24 }",
            {
                "match": {
                    "op": "!=",
                    "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                    "right": {
                        "set": [
                            {"prefix": {"addr": "198.51.100.0", "len": 24}},
                            {"prefix": {"addr": "203.0.113.0", "len": 24}},
                        ]
                    },
                }
            },
        ),
        (
            "udp dport 53-54",
            {
                "match": {
                    "op": "==",
                    "left": {"payload": {"protocol": "udp", "field": "dport"}},
                    "right": {"range": [53, 54]},
                }
            },
        ),
        ("meta l4proto tcp", {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}),
        ('iifname "eth0"', {"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": "eth0"}}),
        ("dnat to 10.180.0.4:80", {"dnat": {"addr": "10.180.0.4", "port": 80}}),
        ("dnat to [fd00::1]:80", {"dnat": {"addr": "fd00::1", "port": 80}}),
        ("redirect to :8080", {"redirect": {"port": 8080}}),
        ("masquerade fully-random", {"masquerade": {"flags": "fully-random"}}),
        ("reject with tcp reset", {"reject": {"type": "tcp reset"}}),
        ("reject with icmpx admin-prohibited", {"reject": {"type": "icmpx", "expr": "admin-prohibited"}}),
        ('log prefix "x " level info', {"log": {"prefix": "x ", "level": "info"}}),
        ("limit rate 5/minute", {"limit": {"rate": 5, "burst": 5, "per": "minute"}}),
        (
            "meta mark set meta mark ^ 0x00004000",
            {"mangle": {"key": {"meta": {"key": "mark"}}, "value": {"^": [{"meta": {"key": "mark"}}, 16384]}}},
        ),
        (
            "update @aff { ip saddr }",
            {"set": {"op": "update", "elem": {"payload": {"protocol": "ip", "field": "saddr"}}, "set": "@aff"}},
        ),
        ('xt match "policy"', {"xt": {"type": "match", "name": "policy"}}),
        ("XT target DNAT not found", {"xt": {"type": "target", "name": "DNAT"}}),
    ],
)
def test_statement(body: str, want: dict[str, Any]) -> None:
    assert one_rule(body, family="inet")["expr"] == [want]


def test_xt_fragments_of_builds_without_translations() -> None:
    """nft built without libxtables names the extension instead of translating it."""
    rule = one_rule('ip saddr 10.0.3.0/24 xt match "policy" counter packets 0 bytes 0 xt target "MASQUERADE"')
    assert rule["expr"][1:] == [
        {"xt": {"type": "match", "name": "policy"}},
        {"counter": {"packets": 0, "bytes": 0}},
        {"xt": {"type": "target", "name": "MASQUERADE"}},
    ]
    rule = one_rule("meta l4proto tcp # xt_statistic counter packets 0 bytes 0 # xt_DNAT")
    assert rule["expr"][1:] == [
        {"xt": {"type": "match", "name": "statistic"}},
        {"counter": {"packets": 0, "bytes": 0}},
        {"xt": {"type": "target", "name": "DNAT"}},
    ]


def test_kube_proxy_gen_b_dnat_map() -> None:
    rule = one_rule(
        "meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.244.0.10 . 9898, 1 : 10.244.0.11 . 9898 }"
    )
    assert rule["expr"][1] == {
        "dnat": {
            "family": "ip",
            "addr": {
                "map": {
                    "key": {"numgen": {"mode": "random", "mod": 2, "offset": 0}},
                    "data": {"set": [[0, {"concat": ["10.244.0.10", 9898]}], [1, {"concat": ["10.244.0.11", 9898]}]]},
                }
            },
        }
    }


def test_set_flags_follow_json_not_text() -> None:
    text = """table ip t {
\tset aff {
\t\ttype ipv4_addr
\t\tsize 65535
\t\tflags dynamic,timeout
\t\ttimeout 3h
\t\telements = { 10.0.0.5 timeout 3h expires 2h59m59s940ms }
\t}

\tset sz {
\t\ttype ipv4_addr
\t\ttimeout 1h30m
\t}

\tmap m {
\t\ttype ipv4_addr . inet_proto . inet_service : verdict
\t\telements = { 1.2.3.4 . tcp . 80 comment "ns2/svc2:p80" : drop,
\t\t\t     1.2.3.5 . udp . 53 : goto c2 }
\t}
}
"""
    objs = convert(text)
    aff, sz, m = (next(iter(o.values())) for o in objs[1:])
    assert aff["flags"] == ["timeout"] and aff["timeout"] == 10800 and aff["size"] == 65535
    assert aff["elem"] == [{"elem": {"val": "10.0.0.5", "timeout": 10800, "expires": 10799}}]
    assert sz["flags"] == ["timeout"] and sz["timeout"] == 5400
    assert m["elem"] == [
        [{"elem": {"val": {"concat": ["1.2.3.4", "tcp", 80]}, "comment": "ns2/svc2:p80"}}, {"drop": None}],
        [{"concat": ["1.2.3.5", "udp", 53]}, {"goto": {"target": "c2"}}],
    ]
    assert (aff["line"], sz["line"], m["line"]) == (2, 10, 15)


def test_result_is_not_shared_between_calls() -> None:
    text = PAIRS["zoo"][0].read_text()
    a = convert(text)
    b = copy.deepcopy(a)
    a[5][next(iter(a[5]))]["name"] = "changed"
    assert convert(text) == b


# --- performance ----------------------------------------------------------------------------------


def kube_proxy_listing(n_rules: int, n_elements: int) -> str:
    lines = [
        "table ip kube-proxy {",
        '\tcomment "rules for kube-proxy"',
        "\tmap service-ips {",
        "\t\ttype ipv4_addr . inet_proto . inet_service : verdict",
        '\t\tcomment "ClusterIP, ExternalIP and LoadBalancer IP traffic"',
    ]
    elems = [
        f"172.{30 + i // 65536}.{i // 256 % 256}.{i % 256} . tcp . 80 : goto service-{i:08X}-ns{i}/svc{i}/tcp/p80"
        for i in range(n_elements)
    ]
    lines += ["\t\telements = { " + ",\n\t\t\t     ".join(elems) + " }", "\t}"]
    for c in range(n_rules // 4):
        ip = f"{c // 256 % 256}.{c % 256}"
        lines += [
            f"\tchain service-{c:08X}-ns{c}/svc{c}/tcp/p80 {{",
            f'\t\tip daddr 172.30.{ip} ip saddr != 10.0.0.0/8 meta mark set meta mark | 0x00004000 comment "m"',
            f"\t\tmeta l4proto tcp dnat ip to numgen random mod 2 map {{ 0 : 10.180.{ip} . 80, 1 : 10.181.{ip} . 80 }}",
            f"\t\tip saddr @affinity-{c} goto endpoint-{c}",
            "\t\tct state new counter packets 12 bytes 3400 jump firewall-check",
            "\t}",
        ]
    return "\n".join([*lines, "}"]) + "\n"


def test_large_kube_proxy_listing_converts_in_seconds() -> None:
    text = kube_proxy_listing(20_000, 30_000)
    start = time.perf_counter()
    objs = convert(text)
    took = time.perf_counter() - start
    assert len(rules(objs)) == 20_000
    assert len(objs[1]["map"]["elem"]) == 30_000
    assert not any("unknown" in json.dumps(r["expr"]) for r in rules(objs)[:8])
    assert took < 5.0, f"{took:.1f} s"


# --- live: real nft in a throw-away network namespace (skipped without root and nft) -------------

NS_PREFIX = "kpdtxt-"  # kpdtxt-<pid>-<8 hex digits>, deleted after each test


needs_nft = pytest.mark.skipif(nft_unavailable(NS_PREFIX) is not None, reason=str(nft_unavailable(NS_PREFIX)))


def live_pair(ns: Netns) -> tuple[str, list[dict[str, Any]]]:
    """What a terminal shows for `nft list ruleset` (stderr warnings in place), and `nft -j`'s objects."""
    code, text = ns.run_tty(["nft", "list", "ruleset"], timeout=60)
    assert code == 0, text[:500]
    js = ns.check(["nft", "-j", "list", "ruleset"], timeout=60)
    objs = []
    for obj in json.loads(js)["nftables"]:
        kind, body = next(iter(obj.items()))
        if kind != "metainfo":
            objs.append({kind: {k: v for k, v in body.items() if k != "handle"}})
    return text, objs


@needs_nft
@pytest.mark.parametrize("source", sorted(p.name for p in (PAIRS_DIR / "src").iterdir()))
def test_live_sources_round_trip(source: str) -> None:
    """The pair sources again, on this host's nft: guards against pairs this nft would print otherwise."""
    path = PAIRS_DIR / "src" / source
    with Netns(prefix=NS_PREFIX) as ns:
        if path.suffix == ".nft":
            ns.check(["nft", "-f", str(path)])
        else:
            ns.check(["bash", str(path)], timeout=60)
        text, want = live_pair(ns)
    assert ns.name not in list_netns(NS_PREFIX)
    assert_same(convert(text), want)


@needs_nft
def test_live_generated_kube_proxy_cluster(tmp_path: Path) -> None:
    """A larger kube-proxy table (bench/gen_cluster.py: 400 Services x 3 endpoints), listed by nft."""
    gen_cluster.write(tmp_path, 400, 3, mode="nftables")
    with Netns(prefix=NS_PREFIX) as ns:
        ns.check(["nft", "-f", str(tmp_path / "ruleset.nft")], timeout=120)
        text, want = live_pair(ns)
    assert ns.name not in list_netns(NS_PREFIX)
    got = convert(text)
    assert len(rules(got)) > 2000
    assert_same(got, want)
