"""Parsing a dump with the previous parse's rules (the node agent reads the same dump every
cycle) reads exactly what a parse from nothing reads: the same rules, chains, lines and
diagnostics, whatever changed between the two dumps. And it says which chains changed."""

from __future__ import annotations

import random

import pytest
from conftest import UPSTREAM

from kpdoctor.parse.iptables import Ruleset, parse_save

FIXTURES = sorted((UPSTREAM / "iptables").glob("*.save"))


def _view(rs: Ruleset) -> object:
    return (
        [
            (t.name, dict(t.chains), dict(t.chain_lines), dict(t.policy_lines),
             [(r.table, r.chain, r.line, r.text, r.args, r.body) for r in t.rules])
            for t in rs.tables.values()
        ],
        [(d.line, d.message) for d in rs.diagnostics],
        rs.generator,
    )  # fmt: skip


def _pool(rs: Ruleset) -> dict[str, object]:
    pool = {r.text: r for r in rs.all_rules()}
    for t in rs.unpooled or ():
        pool.pop(t, None)
    return pool


def _mutations(text: str, seed: int) -> list[str]:
    """Each a dump that could follow ``text``: a rule dropped, one added, two swapped, a policy
    changed, a chain declared, a rule with counters or odd quoting added, a block moved."""
    rnd = random.Random(seed)
    lines = text.splitlines(keepends=True)
    rules = [i for i, ln in enumerate(lines) if ln.startswith("-A ")]
    out = []
    i = rnd.choice(rules)
    out.append("".join(lines[:i] + lines[i + 1 :]))
    out.append(
        "".join([*lines[:i], lines[i].replace("-A ", "-A ", 1).rstrip("\n") + " -m comment --comment x\n", *lines[i:]])
    )
    j = next((k for k in rules if k > i and lines[k].split()[1] == lines[i].split()[1]), None)
    if j is not None:
        swapped = list(lines)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        out.append("".join(swapped))
    out.append(text.replace("ACCEPT [0:0]", "DROP [0:0]", 1))
    decl = next(k for k, ln in enumerate(lines) if ln.startswith(":"))
    out.append("".join([*lines[: decl + 1], ":KUBE-NEW-CHAIN - [0:0]\n", *lines[decl + 1 :]]))
    out.append("".join([*lines[:i], "[5:300] " + lines[i], *lines[i + 1 :]]))
    out.append("".join([*lines[:i], lines[i].rstrip("\n") + ' -m comment --comment "odd\n', *lines[i + 1 :]]))
    a, b = sorted(rnd.sample(rules, 2))
    out.append("".join(lines[:a] + lines[b : b + 1] + lines[a:b] + lines[b + 1 :]))
    return out


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_a_parse_with_the_previous_rules_reads_what_a_fresh_parse_reads(path: object) -> None:
    text = path.read_text()  # type: ignore[attr-defined]
    for seed in range(4):
        for new in _mutations(text, seed):
            first = parse_save(text, "dump", "legacy", 4)
            pooled = parse_save(new, "dump", "legacy", 4, reuse=_pool(first))
            fresh = parse_save(new, "dump", "legacy", 4)
            assert _view(pooled) == _view(fresh)
            assert pooled.changed_chains is not None
            # and again from the pooled one: what the agent does cycle after cycle
            again = parse_save(text, "dump", "legacy", 4, reuse=_pool(pooled))
            assert _view(again) == _view(parse_save(text, "dump", "legacy", 4))


def test_changed_chains_are_the_chains_whose_rules_changed() -> None:
    text = FIXTURES[0].read_text()
    first = parse_save(text, "dump", "legacy", 4)
    same = parse_save(text, "dump", "legacy", 4, reuse=_pool(first))
    assert same.changed_chains == set()
    lines = text.splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if ln.startswith("-A KUBE-SEP-"))
    chain = lines[i].split()[1]
    dropped = parse_save("".join(lines[:i] + lines[i + 1 :]), "dump", "legacy", 4, reuse=_pool(same))
    assert dropped.changed_chains == {("nat", chain)}
