"""x86_64 host binary with HIP kernels compiled by Debian's hipcc (HIP 5.7, clang 17)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.flavors.base import DeviceCode, FlavorView
from orchestrator.flavors.gpu import (
    DEFAULT_ROCM_TARGETS,
    check_gpu_mode,
    check_kernels_mode,
    check_target_names,
)
from orchestrator.flavors.x86 import X86Flavor

# The AMDGPU processors the image's LLVM 17 (the one hipcc drives) can generate code for.
LIST_PROCESSORS = ("sh", "-c", "llc-17 -march=amdgcn -mcpu=help </dev/null 2>&1")


class RocmFlavor(X86Flavor):
    name = "rocm"
    template = "rocm.Dockerfile.j2"

    def gpu_targets(self, view: FlavorView) -> tuple[str, ...]:
        return view.settings_for(self.name).gpu_targets or DEFAULT_ROCM_TARGETS

    def environment(self, view: FlavorView) -> Mapping[str, str]:
        targets = self.gpu_targets(view)
        return {
            # ROCm's CMake convention, `;`-separated
            "AMDGPU_TARGETS": ";".join(targets),
            "ORCHESTRATOR_GPU_TARGETS": ",".join(targets),
        }

    def device_code(self, view: FlavorView) -> DeviceCode | None:
        return DeviceCode(
            kind="rocm",
            targets=self.gpu_targets(view),
            list_argv=LIST_PROCESSORS,
            compiler_version_argv=("hipcc", "--version"),
            kernels=view.settings_for(self.name).kernels,
            runtime_compiler="libhiprtc",
        )

    def validate(self, view: FlavorView) -> None:
        super().validate(view)
        check_target_names(self.name, self.gpu_targets(view))
        check_kernels_mode(self.name, view.settings_for(self.name).kernels)
        check_gpu_mode(self.name, view.settings_for(self.name).gpu)
