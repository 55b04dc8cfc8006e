"""Prepare the training data of one pipeline run: write a small dataset manifest into the run directory.

Standard library only, so the same file runs in the training image and as a local process on the
simulated cluster. ``EXAMPLE_STEP_SECONDS`` paces the progress lines (default 1 s per step).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import zlib
from pathlib import Path

STEP_SECONDS = float(os.environ.get("EXAMPLE_STEP_SECONDS", "1.0"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="prepare the training data of one run")
    parser.add_argument("--out", required=True, help="the run directory")
    parser.add_argument("--shards", type=int, default=4)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Seeded by the run directory: the same run always prepares the same data.
    rng = random.Random(zlib.crc32(str(out).encode()))
    rows = []
    for shard in range(1, args.shards + 1):
        count = rng.randint(2000, 3000)
        rows.append(count)
        print(f"prepare: shard {shard}/{args.shards}: {count} rows cleaned and tokenized", flush=True)
        time.sleep(STEP_SECONDS)
    manifest = {"shards": args.shards, "rows": sum(rows), "seed": rng.randint(0, 2**31)}
    (out / "data.json").write_text(json.dumps(manifest, indent=2))
    print(f"prepare: wrote {out / 'data.json'} ({manifest['rows']} rows)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
