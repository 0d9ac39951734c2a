"""x86_64 host binary with CUDA kernels compiled by Debian's nvcc 12.4 for a list of sm targets."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.flavors.base import DeviceCode, FlavorView
from orchestrator.flavors.gpu import (
    DEFAULT_CUDA_TARGETS,
    check_gpu_mode,
    check_kernels_mode,
    check_target_names,
)
from orchestrator.flavors.x86 import X86Flavor


class CudaFlavor(X86Flavor):
    name = "cuda"
    template = "cuda.Dockerfile.j2"
    apt_components = ("main", "contrib", "non-free")

    def gpu_targets(self, view: FlavorView) -> tuple[str, ...]:
        return view.settings_for(self.name).gpu_targets or DEFAULT_CUDA_TARGETS

    def environment(self, view: FlavorView) -> Mapping[str, str]:
        targets = self.gpu_targets(view)
        return {
            # CMake's convention (numbers, `;`-separated), so cmake-based -sys crates agree
            "CUDAARCHS": ";".join(t.removeprefix("sm_") for t in targets),
            "ORCHESTRATOR_GPU_TARGETS": ",".join(targets),
        }

    def device_code(self, view: FlavorView) -> DeviceCode | None:
        return DeviceCode(
            kind="cuda",
            targets=self.gpu_targets(view),
            list_argv=("nvcc", "--list-gpu-code"),
            compiler_version_argv=("nvcc", "--version"),
            kernels=view.settings_for(self.name).kernels,
            runtime_compiler="libnvrtc",
        )

    def validate(self, view: FlavorView) -> None:
        super().validate(view)
        check_target_names(self.name, self.gpu_targets(view))
        check_kernels_mode(self.name, view.settings_for(self.name).kernels)
        check_gpu_mode(self.name, view.settings_for(self.name).gpu)
