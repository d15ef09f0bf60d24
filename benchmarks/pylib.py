"""pip-installed libraries doing real work.

Usage: python pylib.py SECTIONS         Python-Markdown (https://pypi.org/project/Markdown/) renders a
                                        generated document of headings, paragraphs with inline markup,
                                        nested lists, tables and fenced code to HTML
       python pylib.py pandas ROWS      a pandas/numpy job: an orders table of ROWS rows merged with two
                                        dimension tables, string columns built, grouped, pivoted,
                                        sorted, the top rows turned into records
       python pylib.py black FUNCTIONS  black (mypyc-compiled in its wheels) formats a generated,
                                        badly formatted module of FUNCTIONS functions and classes

benchmarks/run.py installs Markdown in its benchmark venv; benchmarks/pyperf_table.py installs
all three in its own. With BENCH_DECORATE_MAIN=1 and a `profile` in builtins
(`python -m memory_profiler`), the workload's function is decorated with it.
"""

import builtins
import os
import sys
from collections.abc import Callable


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


def markdown_job(sections: int) -> None:
    import markdown  # type: ignore[import-untyped, import-not-found, unused-ignore]

    text = document(sections)
    html = markdown.markdown(text, extensions=["tables", "fenced_code", "toc"])
    print(len(text), len(html))


def pandas_job(rows: int) -> None:
    import numpy as np  # type: ignore[import-not-found, unused-ignore]
    import pandas as pd  # type: ignore[import-untyped, import-not-found, unused-ignore]

    rng = np.random.default_rng(7)
    customers, skus = max(rows // 20, 1), 5000
    orders = pd.DataFrame({
        "order": np.arange(rows),
        "customer": rng.integers(0, customers, rows),
        "sku": rng.integers(0, skus, rows),
        "qty": rng.integers(1, 9, rows),
        "price": rng.random(rows) * 100,
    })
    orders["day"] = pd.Timestamp("2026-01-01") + pd.to_timedelta(orders["order"] % 365, unit="D")
    products = pd.DataFrame({"sku": np.arange(skus), "category": [f"cat{i % 37:02d}" for i in range(skus)]})
    people = pd.DataFrame({"customer": np.arange(customers), "region": [f"region{i % 11}" for i in range(customers)]})
    df = orders.merge(products, on="sku").merge(people, on="customer")
    df["amount"] = df["qty"] * df["price"]
    df["label"] = df["region"] + "/" + df["category"]
    summary = df.groupby(["region", "category"])["amount"].agg(["sum", "mean", "count"])
    monthly = df.groupby([df["day"].dt.month, "region"])["amount"].sum().unstack()
    best = df.sort_values("amount", ascending=False).head(2000)
    top = best[["order", "label", "amount"]].to_dict("records")
    print(len(df), len(summary), monthly.shape, len(top), f"{summary['sum'].sum():.2f}")


def messy_module(functions: int) -> str:
    """Valid Python that black has much to do on: odd spacing, long lines, quotes, nesting."""
    parts = ["import os,sys\nfrom typing import Any,Dict , List\n\n"]
    for i in range(functions):
        parts.append(
            f"def f{i}( a,b ,c = {i}, *args,**kw ) :\n"
            f"  x={{'k{i}':[a,b,c], 'n' : ( {i} ,{i + 1}) ,\"s\":'text {i}'}}\n"
            f"  if a>b and (b<c or c== {i}) : return  x ['k{i}'] [0]\n"
            f"  y = [ j*{i} for j in range( {i % 50} ) if j%3==0 ]\n"
            f"  z = {{ k : v for k,v in zip( y , y[ 1: ] ) }}\n"
            f"  return compute(a, b, c, x, y, z, 'a long string literal in function {i}', "
            f"keyword_argument={i}, other=[1,2,3], more={{'a':1,'b':[2,3]}}, last=lambda q :q+{i})\n\n"
            f"class C{i}( object ):\n"
            f"  attr : int={i}\n"
            f"  def method( self,value:int=0 )->Dict[str,Any] :\n"
            f"     return {{ 'value':value+self.attr , \"name\" : f'C{i}' , 'items':[ (n,n*n) for n in range(3)]}}\n\n")
    return "".join(parts)


def black_job(functions: int) -> None:
    import black  # type: ignore[import-untyped, import-not-found, unused-ignore]

    source = messy_module(functions)
    formatted = black.format_str(source, mode=black.Mode())
    print(len(source), len(formatted), formatted.count("\n"))


JOBS: dict[str, Callable[[int], None]] = {"pandas": pandas_job, "black": black_job}


def main() -> int:
    run: Callable[[int], None]
    if len(sys.argv) == 3 and sys.argv[1] in JOBS:
        run, n = JOBS[sys.argv[1]], int(sys.argv[2])
    elif len(sys.argv) == 2:
        run, n = markdown_job, int(sys.argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if os.environ.get("BENCH_DECORATE_MAIN") == "1" and hasattr(builtins, "profile"):
        run = builtins.profile(run)
    run(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
