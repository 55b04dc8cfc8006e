"""Promote the candidate of one run to production: copy its model and metrics into the production
directory, replacing the previous ones atomically (readers never see half a model). Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="promote a candidate model")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--production", required=True)
    args = parser.parse_args(argv)
    production = Path(args.production)
    production.mkdir(parents=True, exist_ok=True)
    for name in ("model.json", "metrics.json"):
        staging = production / f".{name}.tmp"
        shutil.copyfile(Path(args.run_dir) / name, staging)
        os.replace(staging, production / name)
    print(f"promote: {args.run_dir} is now the production model ({production})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
