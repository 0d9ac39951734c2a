"""ensure_base_image / ensure_toolchain_image against FakeEngine: what is reused, what is built."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from orchestrator.config.resolve.toolchains import AptSources, BaseSpec, load_base_spec
from orchestrator.errors import ImageBuildError
from orchestrator.host.bootstrap import MANIFEST, PackageFile, PackageSet
from orchestrator.host.vault import VaultError
from orchestrator.plan.images import ImagePlan, base_image_plan
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime import images
from orchestrator.runtime.engine import LABEL_INPUT_HASH, OutputSink
from orchestrator.runtime.images import (
    FLATTEN_ATTEMPTS,
    FLATTEN_LOST,
    LABEL_PACKAGES_SHA,
    LABEL_ROOTFS_SHA,
    ImageOutcome,
    ensure_base_image,
    ensure_toolchain_image,
    package_set_dir,
)
from tests.unit.fakes import BuildCall, BuildHook, FakeEngine, as_engine

PACKAGES = {"rustc-web": "1.96.0+dfsg1-1", "llvm-19": "1:19.1.7-3"}
UNPACK = {"rust-src": "1.96.0"}
TOOLCHAIN = ImagePlan("orchestrator/cpu:rustc-web-1.96-" + "c" * 16, "c" * 64)
DOCKERFILE = "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"


def step_log() -> tuple[StepLog, io.StringIO]:
    handle = io.StringIO()
    return StepLog(handle, None, None, "test"), handle


def never(*_args: object, **_kwargs: object) -> str:
    raise AssertionError("must not be called")


@pytest.fixture
def base() -> BaseSpec:
    return load_base_spec()


@pytest.fixture(autouse=True)
def no_host_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may run mmdebstrap or download packages."""
    monkeypatch.setattr(images, "make_rootfs", never)
    monkeypatch.setattr(images, "fetch_packages", never)


# -- base image ----------------------------------------------------------------------
def test_base_image_already_there_is_reused(base: BaseSpec, tmp_path: Path) -> None:
    plan = base_image_plan(base)
    fake = FakeEngine()
    existing = fake.add_image(plan.reference, {LABEL_INPUT_HASH: plan.input_hash})
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "rootfs" / f"{plan.input_hash}.tar").write_bytes(b"rootfs")
    log, _ = step_log()
    outcome = ensure_base_image(as_engine(fake), base, plan, tmp_path, log)
    assert (outcome.id, outcome.built) == (existing.id, False)
    assert log.cached
    assert fake.imports == [] and fake.removed_images == []
    # The per-run labels stay out of the recorded outcome.
    assert outcome.as_dict()["labels"] == {
        "org.orchestrator.managed": "1",
        "org.orchestrator.kind": "image",
        LABEL_INPUT_HASH: plan.input_hash,
    }


ROOTFS = b"rootfs"
ROOTFS_SHA = hashlib.sha256(ROOTFS).hexdigest()


def _rootfs_maker(made: list[Path]) -> object:
    def make(_spec: BaseSpec, dest: Path, _log: StepLog) -> str:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(ROOTFS)
        made.append(dest)
        return ROOTFS_SHA

    return make


def test_an_existing_base_image_whose_rootfs_is_not_in_this_cache_gets_it_made_again(
    base: BaseSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release pins the base rootfs from the cache: an image made under another cache
    directory must not leave a release with nothing to pin (it used to stop with exit 53)."""
    plan = base_image_plan(base)
    fake = FakeEngine()
    labels = {LABEL_INPUT_HASH: plan.input_hash, LABEL_ROOTFS_SHA: ROOTFS_SHA}
    existing = fake.add_image(plan.reference, labels)
    made: list[Path] = []
    monkeypatch.setattr(images, "make_rootfs", _rootfs_maker(made))
    log, text = step_log()
    outcome = ensure_base_image(as_engine(fake), base, plan, tmp_path, log)
    assert made == [tmp_path / "rootfs" / f"{plan.input_hash}.tar"]
    # mmdebstrap made the image's own rootfs: the image stays, nothing is imported.
    assert (outcome.id, fake.imports) == (existing.id, [])
    assert not log.cached and "its rootfs made again" in log.detail
    assert "its rootfs is not in" in text.getvalue()
    # Offline (reproduce) never makes one: the vault must hold it.
    other = tmp_path / "offline"
    offline, _ = step_log()
    ensure_base_image(as_engine(fake), base, plan, other, offline, offline=True)
    assert len(made) == 1


def test_a_remade_rootfs_that_differs_from_the_image_s_is_imported_again(
    base: BaseSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = base_image_plan(base)
    fake = FakeEngine()
    fake.add_image(plan.reference, {LABEL_INPUT_HASH: plan.input_hash, LABEL_ROOTFS_SHA: "a" * 64})
    made: list[Path] = []
    monkeypatch.setattr(images, "make_rootfs", _rootfs_maker(made))
    log, text = step_log()
    outcome = ensure_base_image(as_engine(fake), base, plan, tmp_path, log)
    assert outcome.built and len(fake.imports) == 1 and len(made) == 1
    assert fake.imports[0].labels[LABEL_ROOTFS_SHA] == ROOTFS_SHA
    assert "not the image's" in text.getvalue()


def test_same_tag_with_other_inputs_is_removed_and_rebuilt(
    base: BaseSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = base_image_plan(base)
    fake = FakeEngine()
    stale = fake.add_image(plan.reference, {LABEL_INPUT_HASH: "hand-tagged"})
    made: list[Path] = []

    def make_rootfs(spec: BaseSpec, dest: Path, log: StepLog) -> str:
        assert spec == base
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(b"rootfs")
        made.append(dest)
        return "d" * 64

    monkeypatch.setattr(images, "make_rootfs", make_rootfs)
    log, _ = step_log()
    outcome = ensure_base_image(as_engine(fake), base, plan, tmp_path, log)
    assert fake.removed_images == [plan.reference]
    assert made == [tmp_path / "rootfs" / f"{plan.input_hash}.tar"]
    (imported,) = fake.imports
    assert imported.labels == {LABEL_INPUT_HASH: plan.input_hash, LABEL_ROOTFS_SHA: "d" * 64}
    assert outcome.built and outcome.id != stale.id
    assert outcome.labels[LABEL_INPUT_HASH] == plan.input_hash
    assert not log.cached


def test_rootfs_in_cache_is_imported_without_mmdebstrap(base: BaseSpec, tmp_path: Path) -> None:
    plan = base_image_plan(base)
    tarball = tmp_path / "rootfs" / f"{plan.input_hash}.tar"
    tarball.parent.mkdir()
    tarball.write_bytes(b"a cached rootfs")
    fake = FakeEngine()
    log, handle = step_log()
    outcome = ensure_base_image(as_engine(fake), base, plan, tmp_path, log, offline=True)
    (imported,) = fake.imports
    digest = hashlib.sha256(b"a cached rootfs").hexdigest()
    assert (imported.tarball, imported.reference) == (tarball, plan.reference)
    assert imported.labels[LABEL_ROOTFS_SHA] == digest
    assert outcome.built and fake.image(plan.reference) is not None
    assert f"reusing rootfs {tarball}" in handle.getvalue()


def test_offline_without_rootfs_is_a_vault_error(base: BaseSpec, tmp_path: Path) -> None:
    plan = base_image_plan(base)
    fake = FakeEngine()
    log, _ = step_log()
    with pytest.raises(VaultError, match="not in the cache"):
        ensure_base_image(as_engine(fake), base, plan, tmp_path, log, offline=True)
    assert fake.imports == [] and fake.images == {}


def test_remove_superseded_takes_only_the_same_family() -> None:
    plan = ImagePlan("orchestrator/base:trixie-" + "1" * 16, "1" * 64)
    fake = FakeEngine()
    fake.add_image(plan.reference, size=10)
    fake.add_image("orchestrator/base:trixie-" + "0" * 16, size=2_000_000_000)
    fake.add_image("orchestrator/base:bookworm-" + "0" * 16, size=5)
    fake.add_image("orchestrator/cpu:rustc-web-1.96-" + "0" * 16, size=5)
    fake.add_image("someone/else:trixie-" + "0" * 16, {"org.orchestrator.managed": "0"})
    log, handle = step_log()
    images._remove_superseded(as_engine(fake), plan, log)
    assert sorted(fake.images) == [
        "orchestrator/base:bookworm-" + "0" * 16,
        plan.reference,
        "orchestrator/cpu:rustc-web-1.96-" + "0" * 16,
        "someone/else:trixie-" + "0" * 16,
    ]
    assert "freed 2.00 GB of superseded images" in handle.getvalue()


# -- toolchain image -----------------------------------------------------------------
def cache_package_set(base: BaseSpec, cache_dir: Path) -> PackageSet:
    """A package set on disk, as fetch_packages leaves it and load_package_set reads it."""
    directory = package_set_dir(base, PACKAGES, cache_dir, AptSources(), UNPACK)
    contents = {"rustc-web_1.96.deb": b"rustc", "unpack/rust-src_1.96.deb": b"src"}
    files = []
    for name, data in contents.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
        files.append(PackageFile(name, hashlib.sha256(data).hexdigest(), len(data)))
    manifest = [{"file": f.file, "sha256": f.sha256, "size": f.size} for f in files]
    (directory / MANIFEST).write_text(json.dumps(manifest))
    return PackageSet(directory, tuple(files))


def ensure_toolchain(fake: FakeEngine, base: BaseSpec, cache_dir: Path) -> ImageOutcome:
    base_image = ImageOutcome("orchestrator/base:trixie-" + "b" * 16, "sha256:b", "b", False, {})
    log, _ = step_log()
    return ensure_toolchain_image(
        as_engine(fake),
        base=base,
        base_image=base_image,
        plan=TOOLCHAIN,
        dockerfile=DOCKERFILE,
        packages=PACKAGES,
        sources=AptSources(),
        unpack=UNPACK,
        cache_dir=cache_dir,
        log=log,
        offline=True,  # the cached package set must be enough
    )


def test_toolchain_image_from_cached_packages(base: BaseSpec, tmp_path: Path) -> None:
    package_set = cache_package_set(base, tmp_path)
    fake = FakeEngine()
    outcome = ensure_toolchain(fake, base, tmp_path)
    (build,) = fake.builds
    assert build.reference == TOOLCHAIN.reference
    assert build.files == (
        "Dockerfile",
        "packages/rustc-web_1.96.deb",
        "packages/unpack/rust-src_1.96.deb",
    )
    assert build.buildargs == {"BASE_IMAGE": "orchestrator/base:trixie-" + "b" * 16}
    assert build.labels == {
        LABEL_INPUT_HASH: TOOLCHAIN.input_hash,
        LABEL_PACKAGES_SHA: package_set.digest,
    }
    assert outcome.built and outcome.labels[LABEL_PACKAGES_SHA] == package_set.digest
    assert list((tmp_path / "tmp").iterdir()) == []  # the build context is cleaned up


def test_an_image_another_cache_built_still_gets_its_debs_into_this_cache(
    base: BaseSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock pins the image's .debs from this cache: when the engine already holds the
    image (built from another cache folder), they are fetched here all the same."""
    made_elsewhere = cache_package_set(base, tmp_path / "other-cache")
    fake = FakeEngine()
    ensure_toolchain(fake, base, tmp_path / "other-cache")
    fetched: list[Path] = []

    def fetch(
        _base: BaseSpec, _packages: object, directory: Path, _log: object, **_: object
    ) -> PackageSet:
        fetched.append(directory)
        return cache_package_set(base, tmp_path / "this-cache")

    monkeypatch.setattr(images, "fetch_packages", fetch)
    base_image = ImageOutcome("orchestrator/base:trixie-" + "b" * 16, "sha256:b", "b", False, {})
    log, handle = step_log()
    outcome = ensure_toolchain_image(
        as_engine(fake),
        base=base,
        base_image=base_image,
        plan=TOOLCHAIN,
        dockerfile=DOCKERFILE,
        packages=PACKAGES,
        sources=AptSources(),
        unpack=UNPACK,
        cache_dir=tmp_path / "this-cache",
        log=log,
    )
    assert not outcome.built and len(fake.builds) == 1  # the image was reused
    assert fetched == [
        package_set_dir(base, PACKAGES, tmp_path / "this-cache", AptSources(), UNPACK)
    ]
    assert outcome.labels[LABEL_PACKAGES_SHA] == made_elsewhere.digest
    assert "built from other .debs" not in handle.getvalue()  # the same .debs


def test_corrupt_package_cache_is_discarded(base: BaseSpec, tmp_path: Path) -> None:
    package_set = cache_package_set(base, tmp_path)
    (package_set.directory / "rustc-web_1.96.deb").write_bytes(b"tampered")
    fake = FakeEngine()
    with pytest.raises(VaultError, match="package set"):
        ensure_toolchain(fake, base, tmp_path)  # offline: nothing to fetch it again from
    assert not package_set.directory.exists()
    assert fake.builds == []


def failing_builds(count: int, line: str) -> tuple[list[int], BuildHook]:
    """A build hook whose first `count` builds print `line` and fail; and its attempts."""
    attempts: list[int] = []

    def hook(call: BuildCall, on_output: OutputSink) -> None:
        attempts.append(len(attempts) + 1)
        if len(attempts) <= count:
            on_output(line)
            raise ImageBuildError(f"building {call.reference} failed: exit code 1")

    return attempts, hook


def test_flatten_loss_is_built_again(base: BaseSpec, tmp_path: Path) -> None:
    cache_package_set(base, tmp_path)
    attempts, hook = failing_builds(1, f"{FLATTEN_LOST}: /usr/lib/rustlib is missing")
    fake = FakeEngine(build_hook=hook)
    outcome = ensure_toolchain(fake, base, tmp_path)
    assert attempts == [1, 2]
    assert outcome.built and outcome.id == fake.images[TOOLCHAIN.reference].id


def test_flatten_loss_every_time_gives_up(base: BaseSpec, tmp_path: Path) -> None:
    cache_package_set(base, tmp_path)
    attempts, hook = failing_builds(FLATTEN_ATTEMPTS, f"{FLATTEN_LOST}: /usr/bin/cargo")
    fake = FakeEngine(build_hook=hook)
    with pytest.raises(ImageBuildError):
        ensure_toolchain(fake, base, tmp_path)
    assert len(attempts) == FLATTEN_ATTEMPTS
    assert TOOLCHAIN.reference not in fake.images


def test_other_build_failures_are_not_retried(base: BaseSpec, tmp_path: Path) -> None:
    cache_package_set(base, tmp_path)
    attempts, hook = failing_builds(1, "E: unable to locate package")
    fake = FakeEngine(build_hook=hook)
    with pytest.raises(ImageBuildError):
        ensure_toolchain(fake, base, tmp_path)
    assert attempts == [1]


def test_a_base_older_than_the_mirror_is_named_with_what_to_do(
    base: BaseSpec, tmp_path: Path
) -> None:
    cache_package_set(base, tmp_path)
    line = " libc6-dev : Depends: libc6 (= 2.41-12+deb13u5) but 2.41-12+deb13u4 is to be installed"
    attempts, hook = failing_builds(1, line)
    fake = FakeEngine(build_hook=hook)
    with pytest.raises(ImageBuildError, match=r"holds 2\.41-12\+deb13u4") as raised:
        ensure_toolchain(fake, base, tmp_path)
    assert "libc6 2.41-12+deb13u5" in raised.value.message
    assert "clean --images" in raised.value.hint
    assert attempts == [1]
