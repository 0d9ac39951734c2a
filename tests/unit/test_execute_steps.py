"""The step executors through the fake Engine: pipeline plumbing, the image and toolchain
checks, and vendoring crates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.declarations.kinds import Run
from orchestrator.errors import (
    ProfileError,
    SourceError,
    StepFailedError,
    ToolchainMismatchError,
)
from orchestrator.execute.steps import crates, toolchain
from orchestrator.execute.steps import pipeline as pipeline_module
from orchestrator.execute.steps.commands import fetch_file, put_file, run
from orchestrator.execute.steps.pipeline import BIN_DIR, run_workloads
from orchestrator.host.crates import crate_file
from orchestrator.host.packing import single_file_tar
from orchestrator.host.source import LockedCrate
from orchestrator.host.vault import VaultError
from orchestrator.model.layout import PATHS
from orchestrator.plan.steps import StepName
from orchestrator.runtime.engine import Privileges
from orchestrator.runtime.images import ImageOutcome
from orchestrator.runtime.perf import NO_ACCESS, PerfAccess

from .conftest import plan_for
from .execute_rig import (
    EITHER_CRATE,
    EITHER_SUM,
    LOCK,
    Rig,
    answers,
    crate_archive,
    make_options,
    make_rig,
    tar_of,
    untar,
)
from .fakes import FakeEngine, Responder
from .test_toolchain import BOLT_19, BOLT_22, PROFDATA_22, RUSTC_VV


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


# -- pipeline ----------------------------------------------------------------------------
def test_run_logs_the_command_with_rustflags_readable_and_keeps_output(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(project), stack, tmp_path)
    rig.engine.responder = answers(("cargo", 0, ["Compiling demo", "Finished"]))
    environment = {
        "CARGO_ENCODED_RUSTFLAGS": "-Copt-level=3\x1f-Ctarget-cpu=x86-64-v3",
        "CC": "gcc",
    }
    box = rig.pipeline.box
    out = run(box, ["/usr/bin/cargo", "build"], rig.log, "s", environment=environment)
    kept = run(box, ["cargo", "build"], rig.log, "s", keep_output=True)
    assert out == ""
    assert kept == "Compiling demo\nFinished"
    assert "+ CC=gcc RUSTFLAGS='-Copt-level=3 -Ctarget-cpu=x86-64-v3' /usr/bin/cargo build" in (
        rig.text
    )
    assert "Compiling demo" in rig.text
    assert rig.box.execs[0].environment == environment  # the container gets the encoded form


def test_run_turns_a_non_zero_exit_into_step_failed(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(project), stack, tmp_path)
    rig.engine.responder = answers(("cargo", 101, ["error[E0425]"]))
    with pytest.raises(StepFailedError, match=r"step build: `cargo build` exited with 101"):
        run(rig.pipeline.box, ["/usr/bin/cargo", "build", "--release"], rig.log, "build")
    assert "error[E0425]" in rig.text


def test_fetch_file_and_put_file(project: Path, stack: ExitStack, tmp_path: Path) -> None:
    engine = FakeEngine(missing=lambda path: f"bytes of {path}".encode())
    rig = make_rig(make_options(project), stack, tmp_path, engine=engine)
    box, fake = rig.pipeline.box, rig.box
    fetched = fetch_file(box, "/build/out/bin/release", tmp_path / "scratch")
    assert fetched == tmp_path / "scratch" / "release"
    assert fetched.read_bytes() == b"bytes of /build/out/bin/release"

    fake.archives["/build/out/x"] = single_file_tar("/elsewhere/y", b"other")
    with pytest.raises(StepFailedError, match=r"expected only x in the archive"):
        fetch_file(box, "/build/out/x", tmp_path / "scratch")

    put_file(box, "/build/out/pgo/merged.profdata", b"profile")
    assert fake.argvs[-1] == ("mkdir", "-p", "/build/out/pgo")
    parent, data = fake.puts[-1]
    assert parent == "/build/out/pgo"
    assert untar(data) == {"merged.profdata": b"profile"}

    rig.engine.responder = answers(("mkdir", 1, []))
    failing = make_rig(make_options(project), stack, tmp_path, engine=rig.engine)
    with pytest.raises(StepFailedError, match="cannot create /build"):
        put_file(failing.pipeline.box, "/build/host-ca.crt", b"ca")


def test_build_container_and_volume_start_once_and_close_with_the_stack(
    project: Path, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        rig = make_rig(make_options(project), stack, tmp_path)
        assert rig.engine.containers == []  # nothing before first use
        box = rig.pipeline.box
        assert rig.pipeline.box is box
        assert rig.pipeline.volume == "orchestrator-out-fake-session"
        (started,) = rig.engine.containers
        assert started.spec.network is False
        assert started.spec.volumes == {"orchestrator-out-fake-session": PATHS.out}
        # Builds see the sources read-only: a build script cannot change what later
        # variants compile.
        assert started.spec.read_only_volumes == {"orchestrator-src-fake-session": PATHS.src}
        assert started.spec.environment == rig.pipeline.plan.build.environment
        assert len(rig.engine.volumes) == 2
        # The profiling container sees the same sources, read-only.
        rig.pipeline.profiler()
        profiler = rig.engine.containers[-1]
        assert profiler.spec.read_only_volumes == {"orchestrator-src-fake-session": PATHS.src}
        assert profiler.spec.volumes == {"orchestrator-out-fake-session": PATHS.out}
        assert rig.pipeline.title(StepName.PUBLISH) == rig.pipeline.plan.steps[-1].title
        copied = rig.pipeline.copy_binaries("release", rig.log)
        assert copied == {"demo": f"{BIN_DIR}/release/demo"}
        assert started.argvs == [
            ("mkdir", "-p", f"{BIN_DIR}/release"),
            ("cp", rig.pipeline.plan.variants["release"].binary, f"{BIN_DIR}/release/"),
        ]
    assert started.removed
    assert all(volume.removed for volume in rig.engine.volumes)


def test_a_step_needing_the_image_before_it_exists_fails(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(project), stack, tmp_path)
    rig.pipeline.state.image = None
    with pytest.raises(StepFailedError, match="toolchain image before it exists"):
        _ = rig.pipeline.box


GRANTED = PerfAccess(Privileges(cap_add=("PERFMON",)), NO_ACCESS.capabilities)


@pytest.mark.parametrize(("mode", "probed"), [("auto", True), ("instrument", False)])
def test_profiler_gets_perf_access_only_when_perf_may_sample(
    project: Path,
    stack: ExitStack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    probed: bool,
) -> None:
    calls: list[tuple[str, bool]] = []

    def fake_access(engine: object, image: str, *, allowed: bool, **_: object) -> PerfAccess:
        calls.append((image, allowed))
        return GRANTED

    monkeypatch.setattr(pipeline_module, "find_perf_access", fake_access)
    rig = make_rig(make_options(project, bolt_mode=mode), stack, tmp_path)
    before = rig.pipeline.profiler_started
    profiler = rig.pipeline.profiler()
    assert rig.pipeline.profiler() is profiler
    assert [before, rig.pipeline.profiler_started] == [False, True]
    image = rig.pipeline.plan.image.reference
    assert calls == ([(image, True)] if probed else [])
    (started,) = rig.engine.containers
    assert started.spec.purpose == "profile"  # the one container is the profiler
    expected = GRANTED.privileges if probed else Privileges()
    assert started.spec.privileges == expected


def test_run_workloads_wraps_each_with_its_index_and_the_runner(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, workloads=(Run(("--help",)), Run(("run", "x"))), bolt=False)
    rig = make_rig(options, stack, tmp_path, flavor="aarch64")
    runner = rig.pipeline.plan.runner
    assert runner  # aarch64 runs its binaries under qemu
    wrap = ["perf", "record", "-o", "/raw/perf-{index}.data", "--"]
    ran = run_workloads(
        rig.pipeline, {"demo": "/b/demo"}, rig.log, "s", environment={"A": "1"}, wrap=wrap
    )
    assert ran == [0, 1]
    profiler = rig.engine.containers[-1]
    assert profiler.spec.purpose == "profile"
    assert profiler.argvs == [
        ("perf", "record", "-o", "/raw/perf-0.data", "--", *runner, "/b/demo", "--help"),
        ("perf", "record", "-o", "/raw/perf-1.data", "--", *runner, "/b/demo", "run", "x"),
    ]
    assert all(e.environment == {"A": "1"} for e in profiler.execs)


def test_run_workloads_without_workloads_is_a_profile_error(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    plan = replace(plan_for(options), workloads=())  # a plan never has none: make_plan refuses
    rig = make_rig(options, stack, tmp_path, plan=plan)
    with pytest.raises(ProfileError, match="no training workloads"):
        run_workloads(rig.pipeline, {"demo": "/b/demo"}, rig.log, "s")
    assert not rig.pipeline.profiler_started


# -- toolchain ---------------------------------------------------------------------------
def _versions(bolt: str) -> Responder:
    return answers(
        ("-vV", 0, RUSTC_VV.splitlines()),
        ("cargo -V", 0, ["cargo 1.96.0"]),
        ("profdata", 0, PROFDATA_22.splitlines()),
        ("bolt", 0, bolt.splitlines()),
    )


def test_toolchain_check_records_a_coherent_toolchain(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(
        make_options(project), stack, tmp_path, engine=FakeEngine(responder=_versions(BOLT_22))
    )
    toolchain.toolchain_check(rig.pipeline, rig.log)
    spec = rig.pipeline.plan.toolchain
    assert [argv[0] for argv in rig.box.argvs] == [
        spec.tool("rustc"),
        spec.tool("cargo"),
        spec.tool("llvm_profdata"),
        spec.tool("llvm_bolt"),
    ]
    report = rig.pipeline.state.toolchain
    assert report is not None
    assert (report.llvm_major, report.rustc["release"], report.cargo) == (
        22,
        "1.96.0",
        "cargo 1.96.0",
    )
    assert rig.log.detail == "LLVM 22 everywhere"


def test_toolchain_check_refuses_mismatched_llvm(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(
        make_options(project), stack, tmp_path, engine=FakeEngine(responder=_versions(BOLT_19))
    )
    with pytest.raises(ToolchainMismatchError, match=r"LLVM 19\.1\.7"):
        toolchain.toolchain_check(rig.pipeline, rig.log)
    assert rig.pipeline.state.toolchain is None


def test_image_steps_hand_the_plan_to_the_image_builders(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = make_rig(make_options(project, offline=True), stack, tmp_path)
    plan = rig.pipeline.plan
    seen: dict[str, Any] = {}
    base = ImageOutcome(plan.base_image.reference, "sha256:b", "b" * 64, False, {})
    tool = ImageOutcome(plan.image.reference, "sha256:t2", plan.image.input_hash, True, {})

    def ensure_base(
        engine: object, spec: object, image: object, cache: Path, log: object, *, offline: bool
    ) -> ImageOutcome:
        seen["base"] = (spec, image, offline)
        return base

    def ensure_toolchain(engine: object, **kwargs: Any) -> ImageOutcome:
        seen["toolchain"] = kwargs
        return tool

    monkeypatch.setattr(toolchain, "ensure_base_image", ensure_base)
    monkeypatch.setattr(toolchain, "ensure_toolchain_image", ensure_toolchain)
    with pytest.raises(StepFailedError, match="after the base image"):  # no base yet
        toolchain.toolchain_image(rig.pipeline, rig.log)
    toolchain.base_image(rig.pipeline, rig.log)
    toolchain.toolchain_image(rig.pipeline, rig.log)
    assert seen["base"] == (plan.base, plan.base_image, True)
    kwargs = seen["toolchain"]
    assert kwargs["base_image"] is base and kwargs["plan"] == plan.image
    assert kwargs["dockerfile"] == plan.dockerfile and kwargs["offline"] is True
    assert rig.pipeline.state.base is base and rig.pipeline.state.image is tool


# -- fetch-crates ------------------------------------------------------------------------
def _cache(rig: Rig) -> Path:
    return (
        rig.pipeline.options.cache_dir
        / "crates"
        / f"{rig.pipeline.plan.source.cargo_lock_sha256}.tar"
    )


@pytest.fixture
def locked(project: Path) -> Path:
    (project / "crate" / "Cargo.lock").write_text(LOCK)
    return project


def _store(rig: Rig, data: bytes = EITHER_CRATE) -> Path:
    path = crate_file(rig.pipeline.options.cache_dir, LockedCrate("either", "1.15.0", EITHER_SUM))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _downloads(*crates: tuple[str, bytes]) -> dict[str, bytes]:
    """What the fetch container's registry cache holds after `cargo vendor`."""
    return {
        f"{PATHS.root}/fetch-home/registry/cache": tar_of(
            {f"cache/index.crates.io-1949cf8c6b5b557f/{name}": data for name, data in crates}
        )
    }


def _vendored(rig: Rig) -> dict[str, bytes]:
    vendor = rig.pipeline.state.vendor
    assert vendor is not None
    assert vendor.parent == rig.pipeline.scratch  # private to this run
    return untar(vendor.read_bytes())


def test_checked_crate_archives_are_vendored_without_a_container(
    locked: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(locked), stack, tmp_path)
    _store(rig)
    crates.fetch_crates(rig.pipeline, rig.log)
    files = _vendored(rig)
    assert files["vendor/either-1.15.0/src/lib.rs"] == b"pub enum Either {}\n"
    assert json.loads(files["vendor/either-1.15.0/.cargo-checksum.json"]) == {
        "files": {},
        "package": EITHER_SUM,
    }
    assert rig.log.cached and rig.log.detail == "1 crates, each checked against Cargo.lock"
    assert rig.engine.containers == []
    assert _cache(rig).read_bytes() == rig.pipeline.state.vendor.read_bytes()  # type: ignore[union-attr]


def test_the_vendor_tar_is_the_same_bytes_every_time(
    locked: Path, stack: ExitStack, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = make_rig(make_options(locked), stack, tmp_path / "a")
    _store(first)
    crates.fetch_crates(first.pipeline, first.log)
    again = make_rig(make_options(locked), stack, tmp_path / "b")
    crates.fetch_crates(again.pipeline, again.log)
    assert first.pipeline.state.vendor is not None and again.pipeline.state.vendor is not None
    assert first.pipeline.state.vendor.read_bytes() == again.pipeline.state.vendor.read_bytes()


def test_a_tampered_vendor_tree_in_the_cache_never_reaches_the_build(
    locked: Path, stack: ExitStack, tmp_path: Path
) -> None:
    # The attack: edit a vendored source in the cache AND its .cargo-checksum.json.
    rig = make_rig(make_options(locked), stack, tmp_path)
    _store(rig)
    poisoned = tar_of(
        {
            "vendor/either-1.15.0/src/lib.rs": b"pub fn evil() { /* injected */ }\n",
            "vendor/either-1.15.0/.cargo-checksum.json": json.dumps(
                {"files": {}, "package": EITHER_SUM}
            ).encode(),
        }
    )
    _cache(rig).write_bytes(poisoned)
    crates.fetch_crates(rig.pipeline, rig.log)
    assert b"injected" not in b"".join(_vendored(rig).values())
    assert b"injected" not in _cache(rig).read_bytes()  # and the cache copy is replaced


def test_an_altered_crate_archive_is_removed_and_downloaded_again(
    locked: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crates, "host_ca_bundle", lambda: None)
    engine = FakeEngine(archives=_downloads(("either-1.15.0.crate", EITHER_CRATE)))
    rig = make_rig(make_options(locked), stack, tmp_path, engine=engine)
    altered = crate_archive("either-1.15.0", {"src/lib.rs": b"pub fn evil() {}\n"})
    stored = _store(rig, altered)
    crates.fetch_crates(rig.pipeline, rig.log)
    assert "was altered, and was removed" in rig.text
    (fetch,) = engine.containers
    assert (fetch.spec.network, fetch.spec.purpose) == (True, "fetch")
    assert fetch.removed
    plan = rig.pipeline.plan
    assert fetch.puts == [(PATHS.root, plan.source.archive)]
    assert fetch.execs[0].argv == plan.fetch.argv
    assert fetch.execs[0].environment == dict(plan.fetch.environment)
    assert stored.read_bytes() == EITHER_CRATE
    assert _vendored(rig)["vendor/either-1.15.0/src/lib.rs"] == b"pub enum Either {}\n"
    assert rig.log.detail == "1 crates, each checked against Cargo.lock"


def test_downloaded_crates_that_do_not_match_cargo_lock_are_refused(
    locked: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crates, "host_ca_bundle", lambda: None)
    other = crate_archive("either-1.15.0", {"src/lib.rs": b"something else\n"})
    engine = FakeEngine(archives=_downloads(("either-1.15.0.crate", other)))
    rig = make_rig(make_options(locked), stack, tmp_path, engine=engine)
    with pytest.raises(SourceError, match=r"Cargo\.lock pins"):
        crates.fetch_crates(rig.pipeline, rig.log)
    assert not (rig.pipeline.options.cache_dir / "crates" / "registry").exists() or not any(
        (rig.pipeline.options.cache_dir / "crates" / "registry").iterdir()
    )
    assert not _cache(rig).exists()


def test_git_dependencies_are_fetched_afresh_and_registry_crates_come_from_archives(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git_lock = LOCK + (
        '\n[[package]]\nname = "gitdep"\nversion = "0.1.0"\n'
        'source = "git+https://example.org/gitdep?rev=abc#' + "c" * 40 + '"\n'
    )
    (project / "crate" / "Cargo.lock").write_text(git_lock)
    monkeypatch.setattr(crates, "host_ca_bundle", lambda: None)
    cargo_vendor_output = tar_of(
        {
            "vendor/gitdep-0.1.0/src/lib.rs": b"pub fn from_git() {}\n",
            # cargo's own copy of a registry crate is never used: it comes from the archive
            "vendor/either-1.15.0/src/lib.rs": b"pub fn not_from_the_archive() {}\n",
        }
    )
    engine = FakeEngine(
        archives={
            PATHS.vendor: cargo_vendor_output,
            **_downloads(("either-1.15.0.crate", EITHER_CRATE)),
        }
    )
    rig = make_rig(make_options(project), stack, tmp_path, engine=engine)
    _store(rig)
    crates.fetch_crates(rig.pipeline, rig.log)
    assert len(engine.containers) == 1  # git: always downloaded, never trusted from a cache
    files = _vendored(rig)
    assert files["vendor/gitdep-0.1.0/src/lib.rs"] == b"pub fn from_git() {}\n"
    assert files["vendor/either-1.15.0/src/lib.rs"] == b"pub enum Either {}\n"


def test_offline_uses_the_vendor_tar_seeded_from_the_vault(
    locked: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(locked, offline=True), stack, tmp_path)
    with pytest.raises(VaultError, match="offline"):
        crates.fetch_crates(rig.pipeline, rig.log)
    assert rig.engine.containers == []
    seeded = tar_of({"vendor/either-1.15.0/src/lib.rs": b"from the vault\n"})
    _cache(rig).parent.mkdir(parents=True, exist_ok=True)
    _cache(rig).write_bytes(seeded)
    crates.fetch_crates(rig.pipeline, rig.log)
    assert _vendored(rig) == {"vendor/either-1.15.0/src/lib.rs": b"from the vault\n"}
    assert rig.engine.containers == []


def test_the_fetch_container_gets_the_hosts_proxy_and_ca_bundle(
    locked: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "corporate-ca.pem"
    bundle.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    for name in (*crates.PROXY_VARIABLES, *crates._CA_CANDIDATES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))  # skipped: no file
    monkeypatch.setenv("CURL_CA_BUNDLE", str(bundle))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("no_proxy", "localhost")
    assert crates.host_ca_bundle() == bundle
    monkeypatch.delenv("CURL_CA_BUNDLE")
    default = Path("/etc/ssl/certs/ca-certificates.crt")  # the system's, where there is one
    assert crates.host_ca_bundle() == (default if default.is_file() else None)
    monkeypatch.setenv("CURL_CA_BUNDLE", str(bundle))
    engine = FakeEngine(archives=_downloads(("either-1.15.0.crate", EITHER_CRATE)))
    rig = make_rig(make_options(locked), stack, tmp_path, engine=engine)
    crates.fetch_crates(rig.pipeline, rig.log)
    (fetch,) = engine.containers
    assert fetch.argvs[0] == ("mkdir", "-p", PATHS.root)
    assert (fetch.puts[1][0], untar(fetch.puts[1][1])) == (
        PATHS.root,
        {"host-ca.crt": bundle.read_bytes()},
    )
    environment = fetch.execs[-1].environment
    assert environment["CARGO_HTTP_CAINFO"] == crates.HOST_CA_PATH
    assert environment["HTTPS_PROXY"] == "http://proxy.corp:3128"
    assert environment["no_proxy"] == "localhost"
    assert "http_proxy" not in environment
