"""heapscope.label without a client (heapscope/labels.py): what a block sees, nesting, the
decorator on plain and async functions, contextvars' rules for threads and tasks, and the
one-line errors for keys and values the wire cannot carry. Under the client: tests/integration/test_alloc_labels.py."""

from __future__ import annotations

import asyncio
import threading

import pytest

import heapscope
from heapscope.labels import current

pytestmark = pytest.mark.timeout(60)


def test_blocks_nest_and_an_inner_key_replaces_the_outer_value() -> None:
    assert current() == {}
    with heapscope.label(tenant="acme", route="/a"):
        with heapscope.label(route="/b", job=7):
            assert current() == {"tenant": "acme", "route": "/b", "job": "7"}
        assert current() == {"tenant": "acme", "route": "/a"}
    assert current() == {}


def test_the_decorator_on_plain_and_async_functions() -> None:
    @heapscope.label(tenant="globex")
    def plain() -> dict[str, str]:
        return current()

    @heapscope.label(tenant="initech")
    async def coro() -> dict[str, str]:
        await asyncio.sleep(0)
        return current()

    assert plain() == {"tenant": "globex"}
    assert asyncio.run(coro()) == {"tenant": "initech"}
    assert current() == {}


def test_tasks_and_threads_each_see_their_own() -> None:
    seen: dict[str, dict[str, str]] = {}

    async def task(name: str) -> None:
        with heapscope.label(tenant=name):
            for _ in range(3):
                await asyncio.sleep(0)  # the other task runs here
                assert current() == {"tenant": name}
            seen[name] = current()

    async def both() -> None:
        await asyncio.gather(task("a"), task("b"))

    asyncio.run(both())
    with heapscope.label(tenant="main"):
        t = threading.Thread(target=lambda: seen.__setitem__("thread", current()))
        t.start()
        t.join(30)
    assert seen == {"a": {"tenant": "a"}, "b": {"tenant": "b"}, "thread": {}}


@pytest.mark.parametrize("kv", [{}, {"bad key": "x"}, {"k" * 64: "x"}, {"k": "x" * 128}, {"k": "a\0b"}])
def test_what_the_wire_cannot_carry_is_refused(kv: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        heapscope.label(**kv)
