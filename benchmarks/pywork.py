"""Real Python workloads (the interpreter's own allocations).

Usage: python pywork.py N_RECORDS            build records, JSON-encode and decode them, sort and group them
       python pywork.py service N_REQUESTS   a json/dict service: each request's JSON body decoded, a
                                             session store of dicts read and updated, a bounded cache of
                                             encoded responses (some hits, some misses), the answer encoded

With BENCH_DECORATE_MAIN=1 and a `profile` in builtins (`python -m memory_profiler`), the
workload's function is decorated with it: memory_profiler's documented way to profile one.
"""

import builtins
import json
import os
import sys
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any


def records(n: int) -> None:
    rows = [
        {"id": i, "name": f"user{i:07d}", "tags": [f"t{i % 7}", f"g{i % 13}"], "score": (i * 7919) % 10007}
        for i in range(n)
    ]
    text = json.dumps(rows)
    back = json.loads(text)
    back.sort(key=lambda r: (r["score"], r["name"]))
    groups = defaultdict(list)
    for r in back:
        groups[r["tags"][1]].append(r["id"])
    print(len(text), len(groups), back[0]["id"])


OPS = ("add", "view", "tag", "view")
USERS = 20_000
CACHE = 30_000


def service(n: int) -> None:
    sessions: dict[str, dict[str, Any]] = {}
    cache: OrderedDict[str, str] = OrderedDict()
    sent = hits = 0
    for i in range(n):
        user = f"user{(i * 7919) % USERS:05d}"
        body = json.dumps({"user": user, "op": OPS[i % len(OPS)], "request_id": i,
                           "item": {"id": i % 9973, "name": f"item {i % 9973}", "price": (i % 1000) / 10,
                                    "tags": [f"t{i % 7}", f"g{i % 13}", f"c{i % 5}"]}})
        req = json.loads(body)
        s = sessions.setdefault(req["user"], {"cart": [], "tags": {}, "views": 0, "history": []})
        if req["op"] == "add":
            s["cart"].append(req["item"])
            if len(s["cart"]) > 40:  # a checkout: the cart emptied into the history
                s["history"].append({"items": len(s["cart"]), "total": sum(x["price"] for x in s["cart"])})
                s["cart"] = []
        elif req["op"] == "tag":
            for t in req["item"]["tags"]:
                s["tags"][t] = s["tags"].get(t, 0) + 1
        else:
            s["views"] += 1
        key = f"{user}:{len(s['cart'])}:{len(s['tags'])}"
        answer = cache.get(key)
        if answer is None:
            answer = json.dumps({"user": user, "cart": [x["id"] for x in s["cart"]],
                                 "total": round(sum(x["price"] for x in s["cart"]), 2),
                                 "tags": sorted(s["tags"].items()), "views": s["views"],
                                 "orders": len(s["history"]), "request_id": req["request_id"]})
            cache[key] = answer
            if len(cache) > CACHE:
                cache.popitem(last=False)
        else:
            hits += 1
            cache.move_to_end(key)
        sent += len(answer)
    print(sent, len(sessions), len(cache), hits)


def main() -> int:
    run: Callable[[int], None]
    if len(sys.argv) == 3 and sys.argv[1] == "service":
        run, n = service, int(sys.argv[2])
    elif len(sys.argv) == 2:
        run, n = records, int(sys.argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if os.environ.get("BENCH_DECORATE_MAIN") == "1" and hasattr(builtins, "profile"):
        run = builtins.profile(run)
    run(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
