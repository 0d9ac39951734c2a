"""x86_64 host binary with CUDA kernels compiled by Debian's nvcc 12.4 for a list of sm targets."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.config.resolve.options import Options
from orchestrator.flavors.base import DeviceCode
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

    def gpu_targets(self, options: Options) -> tuple[str, ...]:
        return options.settings_for(self.name).gpu_targets or DEFAULT_CUDA_TARGETS

    def environment(self, options: Options) -> Mapping[str, str]:
        targets = self.gpu_targets(options)
        return {
            # CMake's convention (numbers, `;`-separated), so cmake-based -sys crates agree
            "CUDAARCHS": ";".join(t.removeprefix("sm_") for t in targets),
            "ORCHESTRATOR_GPU_TARGETS": ",".join(targets),
        }

    def device_code(self, options: Options) -> DeviceCode | None:
        return DeviceCode(
            kind="cuda",
            targets=self.gpu_targets(options),
            list_argv=("nvcc", "--list-gpu-code"),
            compiler_version_argv=("nvcc", "--version"),
            kernels=options.settings_for(self.name).kernels,
            runtime_compiler="libnvrtc",
        )

    def validate(self, options: Options) -> None:
        super().validate(options)
        check_target_names(self.name, self.gpu_targets(options))
        check_kernels_mode(self.name, options.settings_for(self.name).kernels)
        check_gpu_mode(self.name, options.settings_for(self.name).gpu)
