"""Fake /proc, /sys, /dev, /etc trees for every packaged profile, from real board dumps.

`build_tree(name, root)` writes the tree; a value of `Link(target)` becomes a symlink (as
sysfs driver links are). CPU feature lines are real `/proc/cpuinfo` dumps (trimmed to the
fields detection reads, one or two CPUs per cluster).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

A76 = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop "
    "asimddp"
)
A53 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid"
A78AE = A76 + " uscat ilrcpc flagm paca pacg"
V1 = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma "
    "lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg "
    "dcpodp svei8mm svebf16 i8mm bf16 dgh rng"
)
N1 = A76 + " ssbs"  # Graviton2: no bf16/i8mm
X86_BASE = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ht syscall nx rdtscp lm constant_tsc rep_good nopl xtopology cpuid pni pclmulqdq "
    "ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm "
    "bmi1 avx2 bmi2 erms"
)
ZEN4 = X86_BASE + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bf16"
METEOR_LAKE = X86_BASE + " avx_vnni sha_ni vaes vpclmulqdq gfni"


@dataclass(frozen=True)
class Link:
    target: str


def _arm_cpus(*clusters: tuple[str, str, int]) -> str:
    blocks, n = [], 0
    for part, features, count in clusters:
        for _ in range(count):
            blocks.append(
                f"processor\t: {n}\nBogoMIPS\t: 108.00\nFeatures\t: {features}\n"
                f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\n"
                f"CPU part\t: {part}\nCPU revision\t: 1\n"
            )
            n += 1
    return "\n".join(blocks)


def _x86_cpus(model: str, flags: str, count: int = 2) -> str:
    return "\n".join(
        f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: {model}\nflags\t\t: {flags}\n"
        for i in range(count)
    )


def _dt(model: str, *compatible: str) -> dict[str, str | bytes | Link]:
    base = "sys/firmware/devicetree/base"
    return {
        f"{base}/model": model.encode() + b"\x00",
        f"{base}/compatible": b"".join(c.encode() + b"\x00" for c in compatible),
    }


Tree = dict[str, str | bytes | Link]

TREES: dict[str, Tree] = {
    "generic-x86_64": {
        "proc/cpuinfo": _x86_cpus("AMD EPYC 9R14", ZEN4),
        "sys/class/dmi/id/sys_vendor": "QEMU\n",
        "sys/class/dmi/id/product_name": "Standard PC (Q35 + ICH9, 2009)\n",
    },
    "generic-arm64": {
        "proc/cpuinfo": _arm_cpus(("0xd03", A53, 4)),
        **_dt("Pine64 RockPro64", "pine64,rockpro64", "rockchip,rk3399"),
    },
    "raspberry-pi-5": {
        "proc/cpuinfo": _arm_cpus(("0xd0b", A76, 4)) + "\nModel\t\t: Raspberry Pi 5 Model B\n",
        **_dt("Raspberry Pi 5 Model B Rev 1.0", "raspberrypi,5-model-b", "brcm,bcm2712"),
    },
    "nvidia-jetson-orin": {
        "proc/cpuinfo": _arm_cpus(("0xd42", A78AE, 6)),
        **_dt(
            "NVIDIA Jetson Orin Nano Developer Kit",
            "nvidia,p3768-0000+p3767-0005",
            "nvidia,p3767-0005",
            "nvidia,tegra234",
        ),
        "etc/nv_tegra_release": "# R36 (release), REVISION: 4.0\n",
    },
    "nxp-imx8mp": {
        "proc/cpuinfo": _arm_cpus(("0xd03", A53, 4)),
        **_dt("NXP i.MX8MPlus EVK board", "fsl,imx8mp-evk", "fsl,imx8mp"),
        "dev/galcore": "",
    },
    "rockchip-rk3588": {
        "proc/cpuinfo": _arm_cpus(("0xd05", A76, 4), ("0xd0b", A76, 4)),
        **_dt("Radxa ROCK 5B", "radxa,rock-5b", "rockchip,rk3588"),
        "sys/class/accel/accel0/device/driver": Link("../../../../bus/platform/drivers/rocket"),
    },
    "qualcomm-qcs6490": {
        "proc/cpuinfo": _arm_cpus(("0xd05", A76, 4), ("0xd41", A76, 4)),
        **_dt(
            "Qualcomm Technologies, Inc. Robotics RB3gen2",
            "qcom,qcs6490-rb3gen2",
            "qcom,qcm6490",
        ),
        "dev/fastrpc-cdsp": "",
    },
    "intel-core-ultra-npu": {
        "proc/cpuinfo": _x86_cpus("Intel(R) Core(TM) Ultra 7 155H", METEOR_LAKE),
        "sys/class/dmi/id/sys_vendor": "LENOVO\n",
        "sys/class/accel/accel0/device/driver": Link("../../../../bus/pci/drivers/intel_vpu"),
        "dev/accel/accel0": "",
    },
    "ti-am62a": {
        "proc/cpuinfo": _arm_cpus(("0xd03", A53, 4)),
        **_dt("Texas Instruments AM62A7 SK", "ti,am62a7-sk", "ti,am62a7"),
        "lib/firmware/am62a-c71_0-fw": b"\x7fELF",
        "sys/class/remoteproc/remoteproc2/name": "7e000000.dsp\n",
    },
    "amd-kria-k26": {
        "proc/cpuinfo": _arm_cpus(("0xd03", A53, 4)),
        **_dt(
            "ZynqMP SMK-K26 Rev1/B/A",
            "xlnx,zynqmp-smk-k26-rev1",
            "xlnx,zynqmp-smk-k26-revB",
            "xlnx,zynqmp-smk-k26-revA",
            "xlnx,zynqmp-smk-k26",
            "xlnx,zynqmp",
        ),
        "sys/bus/platform/drivers/zocl/uevent": "",
    },
    "google-coral-devboard": {
        "proc/cpuinfo": _arm_cpus(("0xd03", A53, 4)),
        **_dt("Freescale i.MX8MQ Phanbell", "fsl,imx8mq-phanbell", "fsl,imx8mq"),
        "dev/apex_0": "",
    },
    "aws-graviton3": {
        "proc/cpuinfo": _arm_cpus(("0xd40", V1, 2)),
        "sys/class/dmi/id/sys_vendor": "Amazon EC2\n",
        "sys/class/dmi/id/product_name": "c7g.large\n",
    },
}

# Near misses: (tree, expected profile) — each lacks the one thing its lookalike needs.
NEAR_MISSES: dict[str, tuple[Tree, str]] = {
    "graviton2-no-bf16": (
        {"proc/cpuinfo": _arm_cpus(("0xd0c", N1, 2)), "sys/class/dmi/id/sys_vendor": "Amazon EC2"},
        "generic-arm64",
    ),
    "core-ultra-without-npu-driver": (
        {"proc/cpuinfo": _x86_cpus("Intel(R) Core(TM) Ultra 7 155H", METEOR_LAKE)},
        "generic-x86_64",
    ),
    # Same SoC families as the boards, without the accelerator board's identity.
    "plain-imx8mq-is-not-a-coral": (
        {
            "proc/cpuinfo": _arm_cpus(("0xd03", A53, 4)),
            **_dt("NXP i.MX8MQ EVK", "fsl,imx8mq-evk", "fsl,imx8mq"),
        },
        "generic-arm64",
    ),
    "zynqmp-zcu102-is-not-a-kria": (
        {
            "proc/cpuinfo": _arm_cpus(("0xd03", A53, 4)),
            **_dt("ZynqMP ZCU102 Rev1.0", "xlnx,zynqmp-zcu102-rev1.0", "xlnx,zynqmp"),
        },
        "generic-arm64",
    ),
    "am62x-without-c7x-is-not-am62a": (
        {
            "proc/cpuinfo": _arm_cpus(("0xd03", A53, 4)),
            **_dt("Texas Instruments AM625 SK", "ti,am625-sk", "ti,am625"),
        },
        "generic-arm64",
    ),
    "pi5-dt-but-a53-flags": (
        {
            "proc/cpuinfo": _arm_cpus(("0xd03", A53, 4)),
            **_dt("Raspberry Pi 5 Model B Rev 1.0", "raspberrypi,5-model-b"),
        },
        "generic-arm64",
    ),
}


def write_tree(tree: Tree, root: Path) -> Path:
    for rel, content in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Link):
            path.symlink_to(content.target)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def build_tree(name: str, root: Path) -> Path:
    """Write the fixture tree of profile ``name`` below ``root`` and return ``root``."""
    return write_tree(TREES[name], root)
