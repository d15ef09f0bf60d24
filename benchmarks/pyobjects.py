"""A small object-heavy Python program: trees of small class instances built,
walked and dropped (much like the binary-trees benchmark), plus a list of
records kept to the end.

Usage: python pyobjects.py DEPTH ITERATIONS
"""

import sys


class Node:
    def __init__(self, left: "Node | None", right: "Node | None", value: int) -> None:
        self.left = left
        self.right = right
        self.value = value


def make(depth: int, value: int) -> Node:
    if depth == 0:
        return Node(None, None, value)
    return Node(make(depth - 1, 2 * value), make(depth - 1, 2 * value + 1), value)


def check(node: Node | None) -> int:
    total = 0
    stack = [node]
    while stack:
        n = stack.pop()
        if n is not None:
            total += n.value & 1
            stack.append(n.left)
            stack.append(n.right)
    return total


class Record:
    __slots__ = ("name", "score", "parent")

    def __init__(self, name: str, score: float, parent: "Record | None") -> None:
        self.name = name
        self.score = score
        self.parent = parent


def main() -> int:
    depth, iterations = int(sys.argv[1]), int(sys.argv[2])
    long_lived = make(depth, 1)
    kept: list[Record] = []
    total = 0
    for i in range(iterations):
        total += check(make(depth - 2, i))
        prev = None
        for j in range(2000):
            prev = Record(f"r{i}.{j}", j / 7, prev)
            if j % 10 == 0:
                kept.append(prev)
    print(total, check(long_lived), len(kept))
    return 0


if __name__ == "__main__":
    sys.exit(main())
