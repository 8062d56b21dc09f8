"""Differential fuzzing of the native core against the Python evaluator (issue 42: parity
first), for as long as asked: rule sets generated from every option and target both read, random
packets, each walked both ways (tests/test_native_parity.py's generators and comparison).

    .venv/bin/python bench/fuzz_native.py --minutes 30      # rounds of 2,000 examples, new seed each

Prints each round's examples and the total; the first difference stops the run with the rule
set and packet that show it (hypothesis shrinks it first), exit 1.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import test_native_parity as parity  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--round", type=int, default=2000, help="examples per round")
    ap.add_argument("--seed", type=int, help="the first round's seed (a difference found before, again)")
    args = ap.parse_args()
    end = time.monotonic() + args.minutes * 60
    total = rounds = 0
    while time.monotonic() < end:
        s = args.seed if args.seed is not None and rounds == 0 else random.randrange(2**32)
        count = 0

        @seed(s)
        @settings(
            max_examples=args.round,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(dump=parity.rule_sets(), packets=st.lists(parity.PACKETS, min_size=1, max_size=6))
        def check(dump: str, packets: list[parity.Packet]) -> None:
            nonlocal count
            count += 1
            parity.test_generated_rule_sets_walk_the_same.hypothesis.inner_test(dump, packets)  # type: ignore[attr-defined]

        try:
            check()
        except Exception as exc:  # a difference: hypothesis has shrunk it (its notes hold the example)
            shown = "".join(traceback.format_exception(exc)[-12:])
            print(f"seed {s}: the native core and the Python evaluator differ:\n{shown}", flush=True)
            return 1
        rounds += 1
        total += count
        print(f"round {rounds} (seed {s}): {count} rule sets, {total} in all, no difference", flush=True)
    print(f"{total} generated rule sets in {rounds} rounds ({args.minutes:g} min): the two walks agree on every one")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
