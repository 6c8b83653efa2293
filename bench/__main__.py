"""``python -m bench``: run the benchmark suite (see `bench.suite`)."""

from __future__ import annotations

import sys

from bench.suite import main

if __name__ == "__main__":
    sys.exit(main())
