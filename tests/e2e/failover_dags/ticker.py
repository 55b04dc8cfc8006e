"""A job's container for the failover tests: numbered lines, each with the wall time it was written.

``--lines N --every S``: N lines ``tick <n>/<N> at <unix time>``, S seconds apart. The number tells a
missing or repeated line; the time tells whether a triggerer killed at a known moment may have logged it.
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, required=True)
    parser.add_argument("--every", type=float, required=True)
    args = parser.parse_args()
    for n in range(1, args.lines + 1):
        print(f"tick {n}/{args.lines} at {time.time():.6f}", flush=True)
        if n < args.lines:
            time.sleep(args.every)
    sys.exit(0)


if __name__ == "__main__":
    main()
