"""The cargo commands of one target, spelled in full: every variant's build, `cargo test`
and the crate fetch (plan/build_plan.py decides which variants there are and their
rustflags; plan/cargo_flags.py makes those flags). The executor runs them as given, and
every argument and variable is in the step keys (plan/step_keys.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.config.resolve.cargo_profiles import profile_dir
from orchestrator.config.resolve.toolchains import ToolchainSpec
from orchestrator.flavors import Flavor, FlavorView
from orchestrator.model.layout import PATHS
from orchestrator.plan.c_code import DEFAULT_CC, CCodePlan
from orchestrator.plan.cargo_flags import CargoSettings, feature_args, profile_args
from orchestrator.plan.git_shim import SHIM_SEARCH_PATH
from orchestrator.plan.portable import SysrootPlan


@dataclass(frozen=True)
class CargoCommand:
    argv: tuple[str, ...]
    environment: Mapping[str, str]


@dataclass(frozen=True)
class Variant:
    """One way of building the binaries; bench compares them, validation compares two."""

    name: str  # baseline | release | pgo-generate | optimized | c-off
    build: CargoCommand
    binaries: Mapping[str, str]  # binary -> where cargo leaves it, the main binary first

    @property
    def binary(self) -> str:
        """The main binary (package.binary) in the build container."""
        return next(iter(self.binaries.values()))

    @property
    def rustflags(self) -> list[str]:
        return self.build.environment["CARGO_ENCODED_RUSTFLAGS"].split("\x1f")


def _c_environment(
    sysroot: SysrootPlan | None,
    c_code: CCodePlan | None,
    rustflags: tuple[str, ...],
    *,
    plain: bool,
    c_off: bool = False,
) -> dict[str, str]:
    """What a cargo command's C compiler is given beyond CC=gcc: the floor's headers (not
    the image's) for the target, and with [c_code] mode clang, bitcode and the profile
    flags of its rustflags; the plain baseline gets neither, the C_OFF build the headers."""
    environment: dict[str, str] = {}
    sysroot_cflags = sysroot.cflags if sysroot else ""
    if sysroot is not None:
        environment[sysroot.cflags_variable] = "" if plain else sysroot_cflags
    if c_code is not None:
        if plain:
            environment |= c_code.plain_environment()
        elif c_off:
            environment |= c_code.off_environment(sysroot_cflags)
        else:
            environment |= c_code.environment(rustflags, sysroot_cflags)
    return environment


def split_test_args(args: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`cargo test [cargo args] -- [harness args]`: the args cargo reads (they change what
    is compiled) and the rest from the first "--" on, that one included (only the run)."""
    if "--" not in args:
        return args, ()
    cut = args.index("--")
    return args[:cut], args[cut:]


@dataclass(frozen=True)
class CargoCommands:
    """What the cargo commands of a target read from its options, flavor and toolchain,
    taken once (`cargo_commands`); each command is spelled from these alone."""

    cargo: str
    rust_target: str
    member: str | None  # a workspace member: its binaries, its tests
    binaries: tuple[str, ...]  # the main binary first
    features: tuple[str, ...]  # --no-default-features / --features arguments
    source_date_epoch: int
    flavor_environment: Mapping[str, str]  # cross linker, GPU targets, ...
    test_environment: Mapping[str, str]  # how a test starts a foreign binary
    test_args: tuple[str, ...]  # after cargo test's own; a "--" passes the rest on
    profile: str  # [build] profile: every command but the plain baseline builds with it
    git_shim: bool  # build scripts' `git` answers from the locked commit (plan/git_shim.py)
    sysroot: SysrootPlan | None
    c_code: CCodePlan | None

    def command(
        self,
        verb: str,
        target_dir: str,
        flags: tuple[str, ...],
        *,
        profile: bool,
        plain: bool,
        c_off: bool = False,
    ) -> CargoCommand:
        argv = [self.cargo, verb]
        if self.member:
            argv += ["--package", self.member]
        if verb == "build":
            for name in self.binaries:
                argv += ["--bin", name]
        # The plain baseline is `cargo build --release` whatever [build] profile says
        custom = profile and self.profile != "release"
        argv += [
            *(["--profile", self.profile] if custom else ["--release"]),
            "--offline",
            "--locked",
            "--manifest-path",
            f"{PATHS.src}/Cargo.toml",
            "--target",
            self.rust_target,
            "--target-dir",
            target_dir,
            *self.features,
        ]
        if profile:  # the C_OFF build keeps rustc's fat LTO: no [c_code] profile changes
            changes = self.c_code.profile if self.c_code is not None and not c_off else None
            argv += profile_args(changes, self.profile)
        environment = {
            "SOURCE_DATE_EPOCH": str(self.source_date_epoch),
            # \x1f-separated: flags survive spaces, unlike RUSTFLAGS
            "CARGO_ENCODED_RUSTFLAGS": "\x1f".join(flags),
            "CARGO_HOME": PATHS.cargo_home,
            "TZ": "UTC",
            "LC_ALL": "C.UTF-8",
            **self.flavor_environment,
            # C code from build scripts is compiled by GCC and stays out of the LLVM
            # profile, unless [c_code] mode compiles it with our clang (plan/c_code.py).
            "CC": DEFAULT_CC,
            **({"PATH": SHIM_SEARCH_PATH} if self.git_shim else {}),
        }
        environment |= _c_environment(self.sysroot, self.c_code, flags, plain=plain, c_off=c_off)
        return CargoCommand(tuple(argv), environment)

    def variant(
        self, name: str, flags: tuple[str, ...], *, profile: bool = True, c_off: bool = False
    ) -> Variant:
        """The build of variant `name`; without `profile`, plain `cargo build --release`;
        `c_off`: with [c_code] mode off (`flags` without its link flags)."""
        target_dir = f"{PATHS.target}/{name}"
        folder = profile_dir(self.profile) if profile else "release"
        command = self.command(
            "build", target_dir, flags, profile=profile, plain=not profile, c_off=c_off
        )
        return Variant(
            name,
            command,
            {
                binary: f"{target_dir}/{self.rust_target}/{folder}/{binary}"
                for binary in self.binaries
            },
        )

    def test(
        self, target_dir: str, flags: tuple[str, ...], *, no_run: bool = False
    ) -> CargoCommand:
        """`cargo test` with the test args; `no_run`: `cargo test --no-run`, which compiles
        what that run would and takes only the args before "--" (the harness's come after)."""
        command = self.command("test", target_dir, flags, profile=True, plain=False)
        cargo_args, harness_args = split_test_args(self.test_args)
        # Last: a "--" among them passes what follows to the test binaries. The flavor's test
        # environment (how a test starts a foreign binary) is in the command, so in its key.
        args = (*cargo_args, "--no-run") if no_run else (*cargo_args, *harness_args)
        return CargoCommand(
            (*command.argv, *args), {**command.environment, **self.test_environment}
        )

    def fetch(self) -> CargoCommand:
        """`cargo vendor` of the locked crates into the vendor folder."""
        return CargoCommand(
            (
                self.cargo,
                "vendor",
                "--locked",
                "--versioned-dirs",
                "--manifest-path",
                f"{PATHS.src}/Cargo.toml",
                PATHS.vendor,
            ),
            # A clean CARGO_HOME: the image's one points cargo at the (empty) vendor folder.
            {"CARGO_HOME": f"{PATHS.root}/fetch-home", "TZ": "UTC", "LC_ALL": "C.UTF-8"},
        )


def cargo_commands(
    cargo: CargoSettings,
    view: FlavorView,
    flavor: Flavor,
    toolchain: ToolchainSpec,
    *,
    git_shim: bool,
    sysroot: SysrootPlan | None,
    c_code: CCodePlan | None,
) -> CargoCommands:
    """The cargo commands of `flavor`'s target, from settings already for that flavor."""
    settings = view.settings_for(flavor.name)
    return CargoCommands(
        cargo=toolchain.tool("cargo"),
        rust_target=flavor.rust_target,
        member=cargo.member,
        binaries=cargo.binaries,
        features=tuple(feature_args(settings.default_features, settings.features)),
        source_date_epoch=cargo.source_date_epoch,
        flavor_environment=flavor.environment(view),
        test_environment=flavor.test_environment(view),
        test_args=cargo.test_args,
        profile=cargo.profile,
        git_shim=git_shim,
        sysroot=sysroot,
        c_code=c_code,
    )
