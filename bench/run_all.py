"""Runs every bench/bench_*.py and writes bench/results.json.

Each benchmark prints `name: value` lines, headline last. Usage:
  python bench/run_all.py [--quick] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import subprocess
import sys
import time

BENCH_DIR = pathlib.Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent


def parse_lines(output: str) -> dict[str, str]:
    """The `name: value` lines of a bench's stdout, in the order last printed.

    A bench may print its headline again as its last line (bench_analysis
    does): a repeated name moves to the end, so the last item is the headline.
    """
    values = {}
    for line in output.splitlines():
        name, sep, value = line.partition(": ")
        if sep and name and " " not in name:
            values.pop(name, None)
            values[name] = value.strip()
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    scripts = sorted(BENCH_DIR.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in args.only]
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "mode": "quick" if args.quick else "full",
        "python": platform.python_version(),
        "benchmarks": {},
    }
    failed = []
    for script in scripts:
        command = [sys.executable, "-m", f"bench.{script.stem}"] + (
            ["--quick"] if args.quick else []
        )
        print(f"== {script.stem}", flush=True)
        start = time.monotonic()
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        print(proc.stdout, end="", flush=True)
        values = parse_lines(proc.stdout)
        entry = {"seconds": round(time.monotonic() - start, 1), "values": values}
        if proc.returncode != 0 or not values:
            entry["error"] = proc.stderr[-2000:]
            failed.append(script.stem)
            print(proc.stderr[-2000:], file=sys.stderr)
        else:
            entry["headline"] = list(values.items())[-1]
        results["benchmarks"][script.stem] = entry
    (BENCH_DIR / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {BENCH_DIR / 'results.json'}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
