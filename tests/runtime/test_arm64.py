"""The ONNX backend on ARM64, emulated on x86 with qemu-user.

`.ci/arm64-setup` provides (and caches) an arm64 Debian root with python3.11 and aarch64
wheels pinned to this host's versions. This file is both the pytest module (x86 side) and the
probe the arm64 Python runs (``python3.11 -P test_arm64.py probe JOBS.json``): the probe loads
models through ``wasmgate.runtime.backends`` with a device profile, as the daemon does.

Each emulated CPU gets a fake ``/proc/cpuinfo`` matching it (qemu's ``-L`` prefix redirects the
open): ORT's cpuinfo library segfaults on the host's x86 file and trusts the ARM one for
some features, so a mismatch (e.g. Graviton3 flags on a Cortex-A53) ends in SIGILL.

Timing under emulation is meaningless: these are functional and numerical checks only.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

Job = dict[str, str]
Result = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
PI5_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc "
    "dcpop asimddp"
)
GRAVITON3_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
    "lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg "
    "dcpodp svei8mm svebf16 i8mm bf16 dgh rng"
)
# (qemu -cpu, cpuinfo Features, MIDR part). Graviton3 = Neoverse V1; QEMU 7.2 has no
# neoverse-v1 model, so "max" (which has BF16 and i8mm) with SME off: QEMU 7.2's SME
# emulation gives wrong KleidiAI results (§7.3) and no Graviton has SME.
CORTEX_A76 = ("cortex-a76", PI5_FEATURES, "0xd0b")
GRAVITON3 = ("max,sme=off", GRAVITON3_FEATURES, "0xd40")


# --------------------------------------------------------------------------- both sides


def run_jobs(jobs: list[Job]) -> list[Result]:
    """Load each job's model through the backend layer, run it, save the first output."""
    from wasmgate.device_profiles import load_profile  # noqa: PLC0415 - arm64 side: late import
    from wasmgate.runtime.backends import LoadOptions, ModelSpec, create_backend  # noqa: PLC0415
    from wasmgate.runtime.backends.base import HostInfo  # noqa: PLC0415
    from wasmgate.typed import replace  # noqa: PLC0415

    backend = create_backend("onnx")
    host = HostInfo.current()
    results: list[Result] = []
    for job in jobs:
        result: Result = {"name": job["name"], "machine": host.machine}
        try:
            profile = load_profile(job["profile"])
            if job.get("session_config"):
                ort_settings = profile.onnxruntime
                config = {**ort_settings.session_config, **json.loads(job["session_config"])}
                ort_settings = replace(ort_settings, session_config=config)
                profile = replace(profile, onnxruntime=ort_settings)
            options = LoadOptions(profile=profile, precision=job["precision"])  # type: ignore[arg-type]
            model = backend.load(Path(job["model"]).read_bytes(), ModelSpec(job["name"]), options)
            with np.load(job["inputs"]) as data:
                y = model.infer([data["x"]])[0]
            np.save(job["out"], y)
            result.update(precision=model.precision, notes=model.notes, error=None)
            model.close()
        except Exception as e:  # reported to the x86 side, which asserts on it
            result["error"] = f"{type(e).__name__}: {e}"
        results.append(result)
    return results


# --------------------------------------------------------------------------- x86 side


@dataclass(frozen=True)
class Arm64:
    qemu: str
    root: Path
    site: Path
    python: str


ARM64_VARS = ("WASMGATE_ARM64_QEMU", "WASMGATE_ARM64_ROOT", "WASMGATE_ARM64_SITE",
              "WASMGATE_ARM64_PYTHON")  # fmt: skip


def _arm64_env() -> dict[str, str]:
    """What `.ci/arm64-setup` printed: exported by `.ci/run`, else its cached ``env`` file."""
    if all(name in os.environ for name in ARM64_VARS):
        return {name: os.environ[name] for name in ARM64_VARS}
    tests_cache = Path(os.environ.get("WASMGATE_TEST_CACHE", "~/.cache/wasmgate-tests"))
    cache = Path(os.environ.get("WASMGATE_ARM64_CACHE", tests_cache / "arm64")).expanduser()
    saved = cache / "env"
    if not saved.is_file():
        pytest.fail(
            "no arm64 root: run .ci/arm64-setup once (it installs qemu-user and debootstrap "
            "and fetches aarch64 wheels; .ci/run does it before the tests)"
        )
    return dict(line.split("=", 1) for line in saved.read_text().splitlines() if "=" in line)


@pytest.fixture(scope="module")
def arm64() -> Arm64:
    env = _arm64_env()
    arm = Arm64(
        qemu=env["WASMGATE_ARM64_QEMU"],
        root=Path(env["WASMGATE_ARM64_ROOT"]),
        site=Path(env["WASMGATE_ARM64_SITE"]),
        python=env["WASMGATE_ARM64_PYTHON"],
    )
    for path in (Path(arm.qemu), arm.root / ".done", arm.site / ".done"):
        assert path.exists(), f"{path} is missing: run .ci/arm64-setup again"
    return arm


def cpu_root(arm: Arm64, where: Path, features: str, part: str) -> Path:
    """The cached root seen through symlinks, plus a /proc/cpuinfo for the emulated CPU."""
    root = where / "root"
    (root / "proc").mkdir(parents=True)
    for entry in arm.root.iterdir():
        if entry.name != "proc":
            (root / entry.name).symlink_to(entry)
    block = (
        "processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: {f}\nCPU implementer\t: 0x41\n"
        "CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: {p}\nCPU revision\t: 1\n\n"
    )
    text = "".join(block.format(i=i, f=features, p=part) for i in range(4))
    (root / "proc" / "cpuinfo").write_text(text)
    return root


def run_on_arm64(
    arm: Arm64, where: Path, cpu: tuple[str, str, str], jobs: list[Job]
) -> list[Result]:
    import wasmgate  # noqa: PLC0415

    where.mkdir(parents=True, exist_ok=True)
    root = cpu_root(arm, where, cpu[1], cpu[2])
    (where / "jobs.json").write_text(json.dumps(jobs))
    # The directory holding the installed `wasmgate` package (the editable link tree in dev).
    pythonpath = f"{arm.site}:{Path(wasmgate.__file__).parent.parent}"
    cmd = [
        arm.qemu, "-cpu", cpu[0], "-L", str(root), "-E", f"PYTHONPATH={pythonpath}",
        "-E", "PYTHONDONTWRITEBYTECODE=1",
        arm.python, "-P", str(Path(__file__).resolve()), "probe", str(where / "jobs.json"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, check=False)
    assert proc.returncode == 0, f"arm64 probe failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    results: list[Result] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


def matmul_model(path: Path) -> Path:
    """fp32 MatMul+Add → Relu → MatMul+Add: the ops BF16 fast-math targets (and the fusion trap)."""
    from onnx import TensorProto, helper, numpy_helper, save  # noqa: PLC0415

    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.1, (256, 256)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(0, 0.1, 256).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.normal(0, 0.1, (256, 16)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.normal(0, 0.1, 16).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["input", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp_matmul",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 16])],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, path)
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("arm64")


@pytest.fixture(scope="module")
def int8_jobs(work: Path, models: Any) -> dict[str, Job]:
    """INT8 models with fixed inputs: QDQ MLPs and the QDQ MobileNet (QLinearConv)."""
    rng = np.random.default_rng(0)
    with np.load(models.digits_test) as d, np.load(models.anomaly_test) as a:
        inputs = {
            "digits": (models.digits_int8, d["x"][:64]),
            "anomaly": (models.anomaly_int8, a["features"][:64]),
            "mobilenet": (models.mobilenet_int8, rng.normal(size=(2, 3, 128, 128))),
        }
    jobs = {}
    for name, (model, x) in inputs.items():
        np.savez(work / f"{name}-in.npz", x=np.asarray(x, dtype=np.float32))
        jobs[name] = {"name": name, "model": str(model), "inputs": str(work / f"{name}-in.npz"),
                      "precision": "int8"}  # fmt: skip
    return jobs


def with_out(job: Job, where: Path, profile: str, **extra: str) -> Job:
    return {**job, "profile": profile, "out": str(where / f"{job['name']}.npy"), **extra}


@pytest.fixture(scope="module")
def a76_run(
    arm64: Arm64, work: Path, int8_jobs: dict[str, Job], models: Any
) -> tuple[Path, dict[str, Result]]:
    where = work / "a76"
    jobs = [with_out(j, where, "raspberry-pi-5") for j in int8_jobs.values()]
    bf16 = {**int8_jobs["digits"], "name": "digits-bf16", "model": str(models.digits_fp32)}
    jobs.append(with_out(bf16, where, "raspberry-pi-5", precision="bf16"))
    return where, {r["name"]: r for r in run_on_arm64(arm64, where, CORTEX_A76, jobs)}


@pytest.fixture(scope="module")
def graviton_run(arm64: Arm64, work: Path) -> tuple[Path, dict[str, Result]]:
    where = work / "graviton3"
    where.mkdir()
    model = matmul_model(work / "matmul.onnx")
    np.savez(
        work / "matmul-in.npz", x=np.random.default_rng(6).normal(size=(32, 256)).astype(np.float32)
    )
    base = {"model": str(model), "inputs": str(work / "matmul-in.npz")}
    jobs = [
        with_out({**base, "name": "fp32", "precision": "fp32"}, where, "aws-graviton3"),
        with_out({**base, "name": "bf16", "precision": "bf16"}, where, "aws-graviton3"),
    ]
    return where, {r["name"]: r for r in run_on_arm64(arm64, where, GRAVITON3, jobs)}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_int8_on_cortex_a76_matches_x86_exactly(
    a76_run: tuple[Path, dict[str, Result]], int8_jobs: dict[str, Job], work: Path
) -> None:
    where, arm = a76_run
    x86_dir = work / "x86"
    x86_dir.mkdir(exist_ok=True)
    # x86 without VNNI (this CI VM: AVX2 only) runs U8S8 GEMMs with VPMADDUBSW, whose int16
    # pair sums saturate: up to 0.4 off in digits probabilities, 4.7 % of the MobileNet logits.
    # session.x64quantprecision=1 selects exact kernels; then x86 and ARM agree bit for bit.
    exact = json.dumps({"session.x64quantprecision": "1"})
    jobs = [
        with_out(j, x86_dir, "generic-x86_64", session_config=exact) for j in int8_jobs.values()
    ]
    x86 = {r["name"]: r for r in run_jobs(jobs)}
    assert platform.machine() == "x86_64"
    for name in int8_jobs:
        assert arm[name]["error"] is None, arm[name]["error"]
        assert x86[name]["error"] is None, x86[name]["error"]
        assert arm[name]["machine"] == "aarch64"
        y_arm, y_x86 = np.load(where / f"{name}.npy"), np.load(x86_dir / f"{name}.npy")
        assert y_arm.shape == y_x86.shape
        assert np.array_equal(y_arm, y_x86), f"{name}: max |diff| {np.abs(y_arm - y_x86).max()}"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_bf16_is_refused_on_a_cpu_without_bf16(a76_run: tuple[Path, dict[str, Result]]) -> None:
    error = a76_run[1]["digits-bf16"]["error"]
    assert error is not None
    assert "bf16" in error
    assert "aarch64" in error


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_bf16_fastmath_on_graviton3_changes_matmul_within_tolerance(
    graviton_run: tuple[Path, dict[str, Result]], work: Path
) -> None:
    where, arm = graviton_run
    for name in ("fp32", "bf16"):
        assert arm[name]["error"] is None, arm[name]["error"]
        assert arm[name]["machine"] == "aarch64"
    assert arm["bf16"]["precision"] == "bf16"
    assert any("fast-math" in n for n in arm["bf16"]["notes"])
    fp32, bf16 = np.load(where / "fp32.npy"), np.load(where / "bf16.npy")
    x86_dir = work / "x86-matmul"
    x86_dir.mkdir(exist_ok=True)
    job = {"name": "fp32", "precision": "fp32", "model": str(work / "matmul.onnx"),
           "inputs": str(work / "matmul-in.npz")}  # fmt: skip
    assert run_jobs([with_out(job, x86_dir, "generic-x86_64")])[0]["error"] is None
    np.testing.assert_allclose(fp32, np.load(x86_dir / "fp32.npy"), rtol=1e-4, atol=1e-5)
    rel = float(np.abs(bf16 - fp32).max() / np.abs(fp32).max())
    assert not np.array_equal(bf16, fp32), "BF16 fast-math had no effect on MatMul"
    assert 0 < rel < 2e-2, f"relative difference {rel}"


if __name__ == "__main__":  # the arm64 probe: python3.11 -P test_arm64.py probe JOBS.json
    if len(sys.argv) != 3 or sys.argv[1] != "probe":
        sys.exit("usage: test_arm64.py probe JOBS.json")
    print(json.dumps(run_jobs(json.loads(Path(sys.argv[2]).read_text()))))
