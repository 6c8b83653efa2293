"""``python -m wasmgate``: the same entry point as the ``wasmgate`` console script."""

import sys

from wasmgate.runtime.cli import main

if __name__ == "__main__":
    sys.exit(main())
