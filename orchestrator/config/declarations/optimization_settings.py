"""The settings of the optimizations a build measures and ships: PGO, BOLT and the speed
gate (`[pgo]`, `[bolt]`, `[gate]`), in the order the README's table lists them."""

from __future__ import annotations

from orchestrator.config.declarations.setting import Setting

# The seeds' BOLT recipe, spelled for LLVM 19-22.
DEFAULT_BOLT_FLAGS = (
    "-reorder-blocks=ext-tsp",
    "-reorder-functions=cdsort",
    "-split-functions",
    "-split-all-cold",
    "-icf=1",
    # Without these two, BOLT puts the new code in a 2 MiB-aligned segment for huge
    # pages: tinyllm grew from 0.88 MB to 6.4 MB. With them it stays 0.69 MB (the old
    # .text is reused where the new code fits), with the same output and counts.
    "-no-huge-pages",
    "-use-old-text",
    "-dyno-stats",
)

# The fixed part of the schema. `flavors.<name>` tables are declared by FLAVOR_SETTINGS.

OPTIMIZATION_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "pgo.enabled",
        "bool",
        True,
        "profile-guided optimization",
        attr="pgo",
        flag="--pgo/--no-pgo",
    ),
    Setting(
        "pgo.max_missing_ratio",
        "float",
        0.1,
        "fail when rustc's missing-profile warnings exceed this share of profiled functions",
        attr="pgo_max_missing_ratio",
    ),
    Setting(
        "bolt.enabled",
        "bool",
        True,
        "BOLT post-link optimization",
        attr="bolt",
        flag="--bolt/--no-bolt",
    ),
    Setting(
        "bolt.mode",
        "str",
        "auto",
        "how to profile for BOLT: auto (best available), lbr, sample, instrument",
        attr="bolt_mode",
        flag="--bolt-mode",
        choices=("auto", "lbr", "sample", "instrument"),
    ),
    Setting(
        "bolt.policy",
        "str",
        "fallback",
        "when BOLT fails: fallback (ship the PGO binary, loudly) or require (fail)",
        attr="bolt_policy",
        flag="--bolt-policy",
        choices=("fallback", "require"),
    ),
    Setting(
        "bolt.flags",
        "list[str]",
        DEFAULT_BOLT_FLAGS,
        "llvm-bolt optimization flags",
        attr="bolt_flags",
    ),
    Setting(
        "bolt.max_growth",
        "float",
        1.5,
        "the BOLTed binary may be at most this many times the size of the binary it "
        "rewrote; a larger one counts as a BOLT failure (bolt.policy decides)",
        attr="bolt_max_growth",
    ),
    Setting(
        "bolt.min_samples",
        "int",
        20000,
        "a sampled BOLT profile (perf) with fewer samples is not trusted: mode auto "
        "instruments instead, which counts exactly",
        attr="bolt_min_samples",
    ),
    Setting(
        "bolt.sample_repeat",
        "int",
        1,
        "how many times the training workloads run under perf when BOLT samples",
        attr="bolt_sample_repeat",
    ),
    Setting(
        "c_code.mode",
        "str",
        "off",
        "how build scripts' C and C++ (the cc crate) are compiled in every build but the "
        "plain cargo baseline: off (the image's gcc, as cargo would), lto (clang of rustc's "
        "LLVM, linked with the Rust code by cross-language LTO), lto-pgo (lto, and the C "
        "code trained and optimized with the same PGO profile as the Rust code); cpu "
        "flavor only. The mode costs the Rust code rustc's fat LTO, so where the speed gate "
        "runs it also counts a build with the mode off and ships that one if it is faster",
        attr="c_code",
        flag="--c-code",
        choices=("off", "lto", "lto-pgo"),
    ),
    Setting(
        "gate.policy",
        "str",
        "best",
        "which validated variant ships, by callgrind's estimated cycles: best (each of "
        "PGO, BOLT must earn its place by gate.min_gain), require-all (ship every "
        "optimization, fail if one is slower than cargo build --release), off (not measured)",
        attr="gate_policy",
        flag="--gate",
        choices=("best", "require-all", "off"),
    ),
    Setting(
        "gate.min_gain",
        "float",
        0.01,
        "the share of estimated cycles an optimization must save to ship (0.01: 1%)",
        attr="gate_min_gain",
    ),
    Setting(
        "gate.workloads",
        "list[run]",
        (),
        "what the gate counts under callgrind, each run once per variant (empty: "
        "[train] workloads); keep them short: callgrind runs ~50x slower",
        attr="gate_workloads",
    ),
)
