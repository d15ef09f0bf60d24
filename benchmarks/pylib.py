"""A pip-installed pure-Python library doing real work: Python-Markdown
(https://pypi.org/project/Markdown/) renders a generated document of headings,
paragraphs with inline markup, nested lists, tables and fenced code to HTML.
benchmarks/run.py installs the library in its benchmark venv.

Usage: python pylib.py SECTIONS
"""

import sys

import markdown  # type: ignore[import-untyped, import-not-found, unused-ignore]


def document(sections: int) -> str:
    parts = []
    for s in range(sections):
        parts.append(f"## Section {s}: *allocation* and `heap` notes\n")
        parts.append(f"Paragraph {s} with **bold**, _emphasis_, a [link](https://example.org/{s}) and "
                     f"some `inline code`. " * 4 + "\n")
        parts.extend(f"- item {s}.{i}\n    - nested **{i}**\n" for i in range(6))
        parts.append("\n| name | size | count |\n|---|---|---|\n")
        parts.extend(f"| f{s}_{i} | {i * 64} | {i} |\n" for i in range(8))
        parts.append(f"\n```python\ndef f{s}(x):\n    return [x] * {s % 50}\n```\n\n> quoted {s}\n\n")
    return "".join(parts)


def main() -> int:
    text = document(int(sys.argv[1]))
    html = markdown.markdown(text, extensions=["tables", "fenced_code", "toc"])
    print(len(text), len(html))
    return 0


if __name__ == "__main__":
    sys.exit(main())
