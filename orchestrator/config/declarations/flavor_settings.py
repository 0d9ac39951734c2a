"""The keys of a `[flavors.<name>]` table, declared once: kind, default and help. The
settings table of the configuration reference and the flavor overrides read them through
settings.py, which passes them on.
"""

from __future__ import annotations

from orchestrator.config.declarations.kinds import Kind
from orchestrator.config.declarations.setting import FlavorKey

FLAVOR_SETTINGS: tuple[FlavorKey, ...] = (
    FlavorKey("features", "list[str]", (), "cargo features to enable"),
    FlavorKey("default_features", "bool", True, "keep the crate's default features"),
    FlavorKey("levels", "list[str]", (), "CPU levels `release` builds (empty: build.target_cpu)"),
    FlavorKey("gpu_targets", "list[str]", (), "cuda: sm_80, sm_90; rocm: gfx90a (empty: its list)"),
    FlavorKey(
        "kernels",
        "str",
        "embedded",
        'GPU kernels: "embedded" (compiled in, checked per target) or "runtime" (NVRTC/hiprtc)',
    ),
    FlavorKey(
        "test_every_level",
        "bool",
        False,
        "run `cargo test` with each level's own target-cpu (default: every level runs the "
        "first level's test command, so the step cache runs it once per flavor)",
    ),
    FlavorKey(
        "dispatch",
        "bool",
        True,
        "with two or more x86-64 levels built, also ship `<artifact>-auto`: one binary that "
        "runs the best level the CPU has (ORCHESTRATOR_LEVEL=v2|v3|v4 forces one)",
    ),
    FlavorKey(
        "gpu_args",
        "list[str]",
        (),
        "cuda, rocm: arguments that put a validation run on the GPU (e.g. --backend cuda), "
        "appended to each; a training bundle (--train-elsewhere) runs every validation run "
        "with and without them on the machine's GPU, and --profiles compares the two",
    ),
    FlavorKey(
        "gpu",
        "str",
        "auto",
        'cuda, rocm: "auto" passes the engine\'s GPU (nvidia runtime, CDI, /dev/kfd) to the '
        'containers that run the GPU path where it has one; "require" fails without one; '
        '"off" never passes one',
    ),
)
FLAVOR_KEYS: dict[str, Kind] = {f.name: f.kind for f in FLAVOR_SETTINGS}
