"""Real signed test bundles: an Ed25519 key, a trust store, the ``probe`` guest, an ONNX model.

``BundleKit(tmp).build("probe", 1, tag="v1")`` writes ``probe-1.wgb`` signed by the kit's
key; ``kit.trust`` trusts that key for every name. The guest (``guests/probe.c``) chooses
its behaviour by the payload's first byte (see the C file); model ``double`` is y = 2x.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.fixtures.zig import compile_c
from wasmgate.signing.build import DEFAULT_EXPIRY, build_bundle
from wasmgate.signing.keys import generate_key
from wasmgate.signing.trust import TrustStore

GUEST_SRC = Path(__file__).parent / "guests" / "probe.c"


def write_double_model(path: Path) -> Path:
    """y = 2 * x, x and y FP32 [-1, 4] (dynamic batch)."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    node = helper.make_node("Mul", ["x", "two"], ["y"])
    graph = helper.make_graph(
        [node],
        "double",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        initializer=[two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def write_text_model(path: Path) -> Path:
    """Two string inputs, as Triton users' models have them: ``words`` [-1] comes back as
    ``same`` (Identity), ``digits`` [-1] is parsed into ``number`` (Cast string -> int64,
    which fails with ``stoll`` when ONNX Runtime is handed ``bytes`` instead of text)."""
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["words"], ["same"]),
            helper.make_node("Cast", ["digits"], ["number"], to=TensorProto.INT64),
        ],
        "text",
        [helper.make_tensor_value_info(n, TensorProto.STRING, ["n"]) for n in ("words", "digits")],
        [
            helper.make_tensor_value_info("same", TensorProto.STRING, ["n"]),
            helper.make_tensor_value_info("number", TensorProto.INT64, ["m"]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def slow_model(iterations: int = 2_000) -> bytes:
    """y = x, x and y FP32 [-1, 4], after a Loop of ``iterations`` 256x256 MatMuls (1-3 ms
    each on one core, so seconds in all): slow on purpose, and stoppable (ONNX Runtime checks its
    terminate flag on every Loop iteration). The Loop's state starts from the input, so
    nothing can be folded at load time."""
    eye = numpy_helper.from_array(np.eye(256, dtype=np.float32), "eye")
    trips = numpy_helper.from_array(np.array(iterations, np.int64), "trips")
    go = numpy_helper.from_array(np.array(True), "go")
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "eye"], ["h_out"]),
            helper.make_node("Identity", ["go_in"], ["go_out"]),
        ],
        "spin",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("go_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [256, 256]),
        ],
        [
            helper.make_tensor_value_info("go_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [256, 256]),
        ],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Mul", ["eye", "total"], ["h0"]),
        helper.make_node("Loop", ["trips", "go", "h0"], ["h"], body=body),
        helper.make_node("ReduceSum", ["h"], ["hsum"], keepdims=0),
        helper.make_node("Mul", ["hsum", "zero"], ["nothing"]),
        helper.make_node("Add", ["x", "nothing"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        initializer=[eye, trips, go, zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return str(value)


def _section(name: str, table: dict[str, Any]) -> str:
    return f"[{name}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in table.items())


class BundleKit:
    """Builds signed bundles into ``root`` with one signing key."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.key: nacl.signing.SigningKey = generate_key()
        self.trust = TrustStore.empty().with_signer(self.key.verify_key, ["*"], {})
        self.wasm = compile_c([GUEST_SRC])
        self.model = write_double_model(root / "double.onnx")

    def save_trust(self, path: Path) -> Path:
        self.trust.save(path)
        return path

    def build(
        self,
        name: str,
        version: int,
        *,
        tag: str | None = None,
        model: bool = True,
        adapter: bool = True,
        model_name: str = "double",
        model_names: tuple[str, ...] = (),
        model_file: Path | None = None,
        batching: dict[str, int] | None = None,
        io: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None,
        sections: dict[str, dict[str, Any]] | None = None,
        top: dict[str, Any] | None = None,
        selftest: bytes | None = None,
        expect_status: int = 0,
        out_dir: Path | None = None,
        key: nacl.signing.SigningKey | None = None,
        now: datetime | None = None,
        expires_in: timedelta = DEFAULT_EXPIRY,
    ) -> Path:
        """Write ``<name>-<version>.wgb``; ``sections`` adds tables (limits, fallback, ...),
        ``top`` top-level keys (``min_daemon_version``); ``model_names`` declares the model
        file under each of these names (default: ``model_name`` only); ``key`` signs instead
        of the kit's key, ``now`` is the issue time; ``io`` the models' inputs and outputs
        (default: ``x`` and ``y``, FP32 [-1, 4])."""
        src = self.root / f"src-{name}-{version}"
        src.mkdir(parents=True, exist_ok=True)
        text = f"name = {_toml(name)}\nversion = {version}\n"
        text += "".join(f"{k} = {_toml(v)}\n" for k, v in (top or {}).items()) + "\n"
        if adapter:
            text += _section("adapter", {"file": str(self.wasm)})
        params = {"tag": tag or f"v{version}"}
        extra = dict(sections or {})
        params.update(extra.pop("params", {}))
        text += _section("params", params)
        for table, values in extra.items():
            text += _section(table, values)
        if selftest is not None:
            payload = base64.b64encode(selftest).decode()
            text += _section("selftest", {"payload_b64": payload, "expect_status": expect_status})
        for model_entry in model_names or ((model_name,) if model else ()):
            entry = {
                "name": model_entry,
                "format": "onnx",
                "variants": {"fp32": str(model_file or self.model)},
                "inputs": io[0] if io else [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
                "outputs": io[1] if io else [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}],
                "batching": batching or {"max_batch_size": 8, "max_queue_delay_us": 500},
            }
            text += "[[models]]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in entry.items())
        (src / "bundle.toml").write_text(text)
        out = (out_dir or self.root) / f"{name}-{version}.wgb"
        build_bundle(src, key or self.key, out, now=now, expires_in=expires_in)
        return out
