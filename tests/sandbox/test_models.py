"""The one tensor contract: datatype table (BF16 included) and `validate`."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from wasmgate.sandbox.models import (
    DATATYPES,
    InputMismatch,
    TensorSpec,
    datatype_of,
    numpy_dtype,
    validate,
)
from wasmgate.signing.manifest import DATATYPE_NAMES

SPECS = [TensorSpec("a", "FP32", (-1, 2)), TensorSpec("b", "INT64", (1,))]
A = np.zeros((3, 2), dtype=np.float32)
B = np.zeros(1, dtype=np.int64)


def test_every_datatype_round_trips_through_numpy() -> None:
    assert numpy_dtype("BF16") == np.dtype(ml_dtypes.bfloat16)
    for name, dtype in DATATYPES.items():
        assert datatype_of(dtype) == name
    assert datatype_of(np.array([b"x"]).dtype) == datatype_of(np.array(["x"]).dtype) == "BYTES"
    with pytest.raises(KeyError):
        datatype_of(np.complex64)


def test_validate_orders_inputs_as_declared() -> None:
    ordered = validate(SPECS, {"b": B, "a": A}, "m")
    assert ordered[0] is A
    assert ordered[1] is B


def test_validate_lists_unknown_and_missing() -> None:
    with pytest.raises(InputMismatch, match=r"m has no input 'c'; its inputs are \['a', 'b'\]"):
        validate(SPECS, {"a": A, "b": B, "c": A}, "m")
    with pytest.raises(InputMismatch, match="m needs input 'b'"):
        validate(SPECS, {"a": A}, "m")


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (A.astype(np.float64), "input 'a': expected datatype FP32, got FP64"),
        (A.astype(ml_dtypes.bfloat16), "expected datatype FP32, got BF16"),
        (A.astype(np.complex64), "expected datatype FP32, got complex64"),
        (np.zeros((3, 3), np.float32), r"expected shape \[-1, 2\] \(-1 = any\), got \[3, 3\]"),
        (np.zeros((3,), np.float32), r"got \[3\]"),
        (np.zeros((1, 3, 2), np.float32), r"got \[1, 3, 2\]"),
        (np.array([[np.nan, np.inf]], np.float32)[:0], None),  # zero rows fit -1
    ],
)
def test_validate_checks_datatype_and_shape(array: npt.NDArray[Any], message: str | None) -> None:
    if message is None:
        validate(SPECS, {"a": array, "b": B})
        return
    with pytest.raises(InputMismatch, match=message):
        validate(SPECS, {"a": array, "b": B})


def test_bf16_and_bytes_inputs_validate() -> None:
    specs = [TensorSpec("h", "BF16", (-1,)), TensorSpec("s", "BYTES", (2,))]
    strings = np.array([b"x", b"yz"], dtype=np.object_)
    validate(specs, {"h": np.ones(4, ml_dtypes.bfloat16), "s": strings})
    with pytest.raises(InputMismatch, match="expected datatype BF16, got FP16"):
        validate(specs, {"h": np.ones(4, np.float16), "s": strings})


def test_the_manifest_and_the_sandbox_share_one_datatype_list() -> None:
    # The manifest once allowed 11 names while requests accepted 14: a UINT16 model could
    # be served but not declared. Both now read DATATYPE_NAMES, in the spec's order.
    assert tuple(DATATYPES) == DATATYPE_NAMES
    assert {"UINT16", "UINT32", "UINT64", "BF16"} <= set(DATATYPE_NAMES)
    assert len(DATATYPE_NAMES) == len(set(DATATYPE_NAMES)) == 14
