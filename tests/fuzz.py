"""Seeded fuzzed records for the tests that push many through a real pipeline."""

from __future__ import annotations

import json
import random

from tests.helpers import beacon, dumps

TS = "2026-01-05T10:00:00.000Z"
BEACON_FIELDS = ("event_id", "event_ts", "session_id", "visitor_id", "type", "page",
                 "experiments", "revenue", "units", "page_load_ms")


def fuzzed_records(seed: int, count: int, max_bytes: int, line_breaks: bool = False
                   ) -> list[bytes]:
    """``count`` records of every kind, about a third valid beacons (some repeated), some
    around ``max_bytes``; with ``line_breaks`` (Kafka values, not lines) the raw bytes may
    hold line breaks too."""
    rng = random.Random(seed)
    good = [dumps(beacon(f"e{i}", TS, session=f"s{i % 97}", visitor=f"v{i % 89}"))
            for i in range(count // 3)]
    out: list[bytes] = []
    while len(out) < count:
        pick = rng.random()
        if pick < 0.3:
            line = good[rng.randrange(len(good))].encode()
        elif pick < 0.45:
            line = rng.randbytes(rng.randrange(120))
            if not line_breaks:
                line = line.replace(b"\n", b" ").replace(b"\r", b" ")
        elif pick < 0.6:
            record = beacon(f"m{len(out)}", TS)
            record[rng.choice(BEACON_FIELDS)] = rng.choice(
                [None, 1e308, -1, "", [], {}, "x" * 200, [None], {"id": None}, 10**30, True])
            line = json.dumps(record).encode()
        elif pick < 0.7:
            line = ("[" * rng.randrange(1, 5_000)).encode()
        elif pick < 0.8:
            line = ("\ufeff" + dumps(beacon(f"b{len(out)}", TS))).encode()
        elif pick < 0.9:
            line = (dumps(beacon(f"p{len(out)}", TS))[:-1]
                    + f',"page":"{"y" * rng.randrange(max_bytes - 200, max_bytes + 200)}"}}'
                    ).encode()
        else:
            line = "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(40))
                           ).encode("utf-8", errors="surrogateescape")
        out.append(line)
    return out
