"""Plugin execution providers (ONNX Runtime >= 1.22's EP library API) a profile may name.

A plugin EP is a shared library ONNX Runtime loads at run time
(`onnxruntime.register_execution_provider_library`) instead of a build that has the EP
compiled in. The library offers `OrtEpDevice`s (`onnxruntime.get_ep_devices()`): one per
device it can drive, with the EP's name and vendor and the hardware's type and vendor. A
profile names the library (or the Python package that ships it), and which devices to take
by type and vendor, in preference order; `selection_policy` instead leaves the choice to
ONNX Runtime's own policy (`SessionOptions.set_provider_selection_policy`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from wasmgate.typed import Document

DeviceType = Literal["CPU", "GPU", "NPU"]
SelectionPolicy = Literal[
    "DEFAULT",
    "PREFER_CPU",
    "PREFER_NPU",
    "PREFER_GPU",
    "MAX_PERFORMANCE",
    "MAX_EFFICIENCY",
    "MIN_OVERALL_POWER",
]


class PluginEp(Document, kw_only=True):
    ep_name: Annotated[
        str,
        Meta(
            min_length=1,
            description="The EP name its devices carry (`OrtEpDevice.ep_name`), e.g. "
            "`OpenVINOExecutionProvider`.",
        ),
    ]
    package: Annotated[
        str,
        Meta(
            description="Python package that ships the library and has `get_library_path()` "
            "(e.g. `onnxruntime_ep_openvino`); or set `library`.",
        ),
    ] = ""
    library: Annotated[
        str, Meta(description="Absolute path of the EP library (instead of `package`).")
    ] = ""
    device_types: Annotated[
        list[DeviceType],
        Meta(
            description="Hardware types to run on, in preference order (`OrtEpDevice.device."
            "type`); the first type with a device wins. Empty: ORT's selection_policy decides."
        ),
    ] = msgspec.field(default_factory=list)
    vendor: Annotated[
        str,
        Meta(description="Only devices of this hardware vendor (e.g. `Intel`); empty: any."),
    ] = ""
    options: Annotated[
        dict[str, str], Meta(description="EP options passed with the selected devices.")
    ] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if bool(self.package) == bool(self.library):
            raise ValueError(f"plugin {self.ep_name}: set exactly one of package and library")
        if self.library and not self.library.startswith("/"):
            raise ValueError(f"plugin {self.ep_name}: library must be an absolute path")
        if len(set(self.device_types)) != len(self.device_types):
            raise ValueError(f"plugin {self.ep_name}: a device type is listed twice")

    @property
    def source(self) -> str:
        """What the profile named: the package or the library path."""
        return self.package or self.library
