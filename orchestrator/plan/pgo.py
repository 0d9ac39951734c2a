"""The PGO part of a target's plan: what the merged profile's key hashes (the profile store
and release.lock name it by that key), where the raw and merged profiles live, and the
llvm-profdata commands that merge and show them. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.declarations.kinds import Run
from orchestrator.config.resolve.toolchains import ToolchainSpec
from orchestrator.flavors import Flavor
from orchestrator.model.hashing import content_hash
from orchestrator.plan.cargo_commands import Variant
from orchestrator.plan.runs import RunPlan


@dataclass(frozen=True)
class PgoPlan:
    profile_key: str  # cache key: everything the profile depends on
    raw_dir: str
    merged: str
    profile_file_pattern: str  # LLVM_PROFILE_FILE: one file per process and binary
    merge_argv: tuple[str, ...]
    show_argv: tuple[str, ...]
    max_missing_ratio: float


def pgo_plan(
    flavor: Flavor,
    *,
    workloads: tuple[Run, ...],
    max_missing_ratio: float,
    toolchain: ToolchainSpec,
    sources: tuple[str, str],  # the source archive's and Cargo.lock's sha256
    image_input_hash: str,
    generate: Variant,
    generate_off: Variant | None,
    runs: RunPlan,
    pgo_dir: str,
    c_pgo: bool,
) -> PgoPlan:
    """The profile's key (everything it depends on) and the commands that merge and show it."""
    return PgoPlan(
        profile_key=content_hash(
            {
                "kind": "pgo-profile",
                "source": sources[0],
                "cargo_lock": sources[1],
                "toolchain": toolchain.flavor_view(flavor.name, flavor.arch),
                "image": image_input_hash,
                "build": [generate.build.argv, dict(generate.build.environment)],
                # [c_code] mode judged by the gate: its mode-off build trains beside it
                **(
                    {"build_c_off": [generate_off.build.argv, dict(generate_off.build.environment)]}
                    if generate_off is not None
                    else {}
                ),
                "workloads": [w.shape() for w in workloads],
                # What the workloads see besides their arguments and the source tree:
                # env, stdin, the inputs' digests (absent without them: such keys stay
                # as they were before these settings existed).
                **({"run": runs.as_dict()} if runs.configured else {}),
            }
        ),
        raw_dir=f"{pgo_dir}/raw",
        merged=f"{pgo_dir}/merged.profdata",
        profile_file_pattern=f"{pgo_dir}/raw/%m_%p.profraw",
        merge_argv=(
            toolchain.tool("llvm_profdata"),
            "merge",
            "-o",
            f"{pgo_dir}/merged.profdata",
            f"{pgo_dir}/raw",
        ),
        show_argv=(
            toolchain.tool("llvm_profdata"),
            "show",
            # lto-pgo: every function's name, to find the C ones (plan/c_code.py)
            *(("--all-functions",) if c_pgo else ()),
            f"{pgo_dir}/merged.profdata",
        ),
        max_missing_ratio=max_missing_ratio,
    )
