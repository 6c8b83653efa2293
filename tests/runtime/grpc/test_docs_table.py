"""docs/grpc.md's status table is the error table's gRPC column, row for row."""

from __future__ import annotations

import re
from pathlib import Path

from wasmgate.runtime.protocol.error_table import INTERNAL, TABLE

DOC = Path(__file__).resolve().parents[3] / "docs" / "grpc.md"


def test_every_error_row_names_its_table_codes() -> None:
    rows = [ln for ln in DOC.read_text().splitlines() if ln.startswith("| `")]
    for cls, answer in TABLE.items():
        (row,) = [r for r in rows if re.search(rf"`{cls.__name__}`", r)]
        assert f"| {answer.status} |" in row, cls.__name__
        assert f"`{answer.grpc}`" in row, cls.__name__
    (unexpected,) = [r for r in rows if "anything unexpected" in r]
    assert f"`{INTERNAL.grpc}`" in unexpected
