"""The -auto folder (release/assemble/compose.py): which flavors compose, its layout and record, its
archive, and `verify`'s check of it, on two level targets published by the real publish
step (a fake Engine; the dispatcher taken from a seeded cache, so no compile)."""

from __future__ import annotations

import io
import json
import struct
import tarfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import FlavorSettings, Options
from orchestrator.errors import DockerUnavailableError
from orchestrator.execute.ship.dispatcher import dispatcher_source
from orchestrator.execute.ship.release_index import update_release_index
from orchestrator.host.cache_seal import seal
from orchestrator.model.documents.cache_records import DispatcherCacheEntry
from orchestrator.model.documents.compose_record import COMPOSE_JSON, ComposeRecord, DispatcherInfo
from orchestrator.model.documents.records import read_record, write_record
from orchestrator.model.hashing import sha256_bytes, sha256_file
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.release.assemble import compose, dispatcher_cache
from orchestrator.release.assemble.shard import compose_where_possible
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import Target, TargetResult
from orchestrator.runtime.engine import Engine
from orchestrator.supply.archives import archived_files
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey, write_key_pair
from orchestrator.supply.verify import verify_release

from .conftest import FAKE_SOURCE, plan_for
from .execute_rig import make_options
from .fakes import FakeEngine
from .publish_rig import extract_and_publish, ready_to_publish

LEVELS = ("x86-64-v2", "x86-64-v3")


def tiny_static_elf(marker: bytes = b"") -> bytes:
    """The smallest file `check_freestanding` takes: an x86_64 ET_EXEC ELF header and one
    PT_LOAD segment, no loader and no dynamic section (the real one is compiled by gcc in
    the toolchain image, which these tests do not start)."""
    header_size, segment_size = 64, 56
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)  # 64-bit, little endian, version 1
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        2,  # ET_EXEC
        62,  # EM_X86_64
        1,
        0x400078,  # entry
        header_size,  # program headers right after the ELF header
        0,  # no section headers
        0,
        header_size,
        segment_size,
        1,
        0,
        0,
        0,
    )
    size = header_size + segment_size + len(marker)
    segment = struct.pack("<IIQQQQQQ", 1, 5, 0, 0x400000, 0x400000, size, size, 0x1000)
    return header + segment + marker


DISPATCHER = tiny_static_elf(b"the dispatcher")


def _options(project: Path, *, dispatch: bool = True, levels: tuple[str, ...] = LEVELS) -> Options:
    options = make_options(project)
    settings = FlavorSettings(levels=levels, dispatch=dispatch)
    return replace(options, flavor_settings={"cpu": settings})


def _built(
    options: Options, levels: tuple[str, ...], status: str = "ok", flavor: str = "cpu"
) -> list[tuple[TargetResult, BuildPlan]]:
    built = []
    for level in levels:
        level_options = replace(options, target_cpu=level)
        plan = plan_for(level_options, flavor)
        result = TargetResult(Target(flavor, level, level_options), plan.artifact_dir)
        result.status = status  # type: ignore[assignment]
        built.append((result, plan))
    return built


def test_a_flavor_with_two_levels_composes_one_auto_folder(project: Path) -> None:
    options = _options(project)
    built = _built(options, LEVELS)
    groups, stale = compose.compose_groups(ReleaseView.from_options(options), built)
    assert stale == []
    [group] = groups
    assert group.folder == "demo-1.2.3-linux-x86_64-cpu-auto"
    assert [level for level, _ in group.levels] == list(LEVELS)
    assert group.levels[1][1].endswith("-cpu-v3")
    assert group.image == built[0][1].image.reference  # its gcc compiles the dispatcher


@pytest.mark.parametrize(
    ("dispatch", "levels", "status"),
    [
        (False, LEVELS, "ok"),  # turned off
        (True, ("x86-64-v2",), "ok"),  # one level: nothing to choose
        (True, LEVELS, "failed"),  # nothing published
    ],
)
def test_no_auto_folder_without_a_choice_or_when_turned_off(
    project: Path, dispatch: bool, levels: tuple[str, ...], status: str
) -> None:
    options = _options(project, dispatch=dispatch, levels=levels)
    groups, stale = compose.compose_groups(
        ReleaseView.from_options(options), _built(options, levels, status)
    )
    assert groups == []
    assert stale == ["demo-1.2.3-linux-x86_64-cpu-auto"]


def test_other_architectures_never_compose(project: Path) -> None:
    options = replace(_options(project), flavor_settings={"aarch64": FlavorSettings()})
    built = _built(options, ("generic", "neoverse-n1"), flavor="aarch64")
    assert compose.compose_groups(ReleaseView.from_options(options), built) == ([], [])


def _publish_levels(project: Path, tmp_path: Path, signer: Signer) -> Options:
    options = _options(project)
    for level in LEVELS:
        with ExitStack() as stack:
            level_options = replace(options, target_cpu=level)
            (tmp_path / level).mkdir()
            extract_and_publish(ready_to_publish(level_options, stack, tmp_path / level, signer))
    return options


def _seed_dispatcher(options: Options, image: str) -> DispatcherInfo:
    """The cache entry `cached_dispatcher` reads, as a compile would have left it."""
    source = sha256_bytes(dispatcher_source())
    folder = dispatcher_cache.cache_folder(options.cache_dir, image)
    folder.mkdir(parents=True)
    (folder / "dispatcher").write_bytes(DISPATCHER)
    info = DispatcherInfo(
        sha256=sha256_bytes(DISPATCHER),
        size=len(DISPATCHER),
        image=image,
        source_sha256=source,
        command=["gcc", "-o", "dispatcher", "dispatcher.c"],
    )
    entry = DispatcherCacheEntry(info=info, seal=seal(f"dispatcher/{folder.name}", info.dump()))
    write_record(folder / "dispatcher.json", entry)
    return info


def test_composed_folder_is_signed_verified_and_a_tampered_copy_fails(
    project: Path, tmp_path: Path
) -> None:
    key = SecretKey.generate()
    public = write_key_pair(key, tmp_path / "keys" / "signing.key", None)
    signer = Signer(key, False, "test key")
    options = _publish_levels(project, tmp_path, signer)
    built = _built(options, LEVELS)
    release = options.artifacts_dir / built[0][1].release_dir
    info = _seed_dispatcher(options, built[0][1].image.reference)
    said: list[str] = []
    engine = FakeEngine()  # asked nothing: the dispatcher is in the cache
    written = compose.compose_release(
        ReleaseView.from_options(options),
        release,
        built,
        engine,
        signer=signer,
        announce=said.append,
    )
    folder = "demo-1.2.3-linux-x86_64-cpu-auto"
    assert written == [folder, f"{folder}.tar.xz", f"{folder}.tar.xz.minisig"]
    assert any("composed" in line for line in said), said
    auto = release / folder
    record = read_record(auto / COMPOSE_JSON, ComposeRecord)
    assert record.dispatcher == info and record.binaries == ["demo"]
    for level, (_result, plan) in zip(LEVELS, built, strict=True):
        artifact = plan.artifact_dir
        copy = auto / "libexec" / "demo" / f"demo-{level}"
        assert copy.read_bytes() == (release / artifact / "demo").read_bytes()
        assert record.levels[level].target == artifact
        assert record.levels[level].binaries["demo"] == sha256_file(copy)
        assert copy.stat().st_mode & 0o777 == 0o755
    assert (auto / "bin" / "demo").read_bytes() == DISPATCHER
    archived = archived_files(release / f"{folder}.tar.xz")
    assert set(archived) == {
        "README.md",  # the crate's, as every archive carries it
        "bin/demo",
        "compose.json",
        "libexec/demo/demo-x86-64-v2",
        "libexec/demo/demo-x86-64-v3",
    }
    assert archived["README.md"] == (0o644, record.docs["README.md"])
    assert archived["bin/demo"] == (0o755, sha256_bytes(DISPATCHER))
    first_archive = (release / f"{folder}.tar.xz").read_bytes()

    update_release_index(release, signer, vouched=tuple(written))
    sums = (release / "SHA256SUMS").read_text()
    assert f"  {folder}/libexec/demo/demo-x86-64-v3\n" in sums
    assert f"  {folder}.tar.xz\n" in sums
    provenance = json.loads((release / "provenance.intoto.jsonl").read_text())
    assert provenance["payloadType"]
    checks, _ = verify_release(release, public)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert ("composed", True) in {(c.check, c.ok) for c in checks}

    # Composing again gives the same bytes (the archive is deterministic)
    compose.compose_release(
        ReleaseView.from_options(options),
        release,
        built,
        engine,
        signer=signer,
        announce=said.append,
    )
    assert (release / f"{folder}.tar.xz").read_bytes() == first_archive

    # A changed libexec copy fails the composed check (and the signed checksum)
    (auto / "libexec" / "demo" / "demo-x86-64-v3").write_bytes(b"tampered")
    checks, _ = verify_release(release, public)
    failed = {(c.file, c.check) for c in checks if not c.ok}
    assert (f"{folder}/{COMPOSE_JSON}", "composed") in failed
    assert ("SHA256SUMS", "checksums") in failed


def _source_with_licences() -> bytes:
    """A crate like ripgrep: COPYING names the Unlicense (UNLICENSE) and MIT (LICENSE-MIT);
    its notice names a path the composed folder keeps for itself."""
    buffer = io.BytesIO()
    files = {
        "src/README.md": b"# demo\n",
        "src/COPYING": b"Dual-licensed under the Unlicense and MIT. See bin/NOTICE.\n",
        "src/UNLICENSE": b"unlicense\n",
        "src/LICENSE-MIT": b"mit\n",
        "src/bin/NOTICE": b"not beside bin/: bin/ is the dispatcher's\n",
        "src/Cargo.toml": b"",
    }
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_the_auto_archive_carries_the_crate_s_readme_and_licences(
    project: Path, tmp_path: Path
) -> None:
    """The archive install.sh installs by default has what every level's has: README,
    COPYING and the licences it names, recorded in compose.json and checked by verify."""
    key = SecretKey.generate()
    public = write_key_pair(key, tmp_path / "keys" / "signing.key", None)
    signer = Signer(key, False, "test key")
    options = _publish_levels(project, tmp_path, signer)
    source = replace(FAKE_SOURCE, archive=_source_with_licences())
    built = [(result, replace(plan, source=source)) for result, plan in _built(options, LEVELS)]
    release = options.artifacts_dir / built[0][1].release_dir
    _seed_dispatcher(options, built[0][1].image.reference)
    written = compose.compose_release(
        ReleaseView.from_options(options),
        release,
        built,
        FakeEngine(),
        signer=signer,
        announce=print,
    )
    folder = "demo-1.2.3-linux-x86_64-cpu-auto"
    docs = ["COPYING", "LICENSE-MIT", "README.md", "UNLICENSE"]
    record = read_record(release / folder / COMPOSE_JSON, ComposeRecord)
    assert sorted(record.docs) == docs
    assert record.docs["UNLICENSE"] == sha256_bytes(b"unlicense\n")
    archived = archived_files(release / f"{folder}.tar.xz")
    assert sorted(name for name in archived if "/" not in name) == sorted([*docs, COMPOSE_JSON])
    assert archived["bin/demo"] == (0o755, sha256_bytes(DISPATCHER))  # not the notice
    assert (release / folder / "LICENSE-MIT").read_bytes() == b"mit\n"
    update_release_index(release, signer, vouched=tuple(written))
    checks, _ = verify_release(release, public)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    composed = next(c for c in checks if c.check == "composed")
    assert composed.detail.endswith("and 4 documents"), composed.detail
    # A licence edited after the release fails the composed check
    (release / folder / "UNLICENSE").write_bytes(b"all rights reserved\n")
    checks, _ = verify_release(release, public)
    failed = {(c.file, c.check) for c in checks if not c.ok}
    assert (f"{folder}/{COMPOSE_JSON}", "composed") in failed


def test_turning_dispatch_off_removes_the_earlier_auto_folder(
    project: Path, tmp_path: Path
) -> None:
    signer = Signer(SecretKey.generate(), False, "test key")
    options = _publish_levels(project, tmp_path, signer)
    built = _built(options, LEVELS)
    release = options.artifacts_dir / built[0][1].release_dir
    _seed_dispatcher(options, built[0][1].image.reference)
    compose.compose_release(
        ReleaseView.from_options(options),
        release,
        built,
        FakeEngine(),
        signer=signer,
        announce=print,
    )
    folder = "demo-1.2.3-linux-x86_64-cpu-auto"
    assert (release / folder / COMPOSE_JSON).is_file()
    off = _options(project, dispatch=False)
    said: list[str] = []
    assert (
        compose.compose_release(
            ReleaseView.from_options(off),
            release,
            _built(off, LEVELS),
            FakeEngine(),
            signer=signer,
            announce=said.append,
        )
        == []
    )
    assert not (release / folder).exists()
    assert not (release / f"{folder}.tar.xz").exists()
    assert not (release / f"{folder}.tar.xz.minisig").exists()
    assert any("removed" in line for line in said)


def test_without_a_cached_dispatcher_or_the_image_nothing_is_composed(
    project: Path, tmp_path: Path
) -> None:
    signer = Signer(SecretKey.generate(), False, "test key")
    options = _publish_levels(project, tmp_path, signer)
    built = _built(options, LEVELS)
    release = options.artifacts_dir / built[0][1].release_dir
    said: list[str] = []
    written = compose.compose_release(
        ReleaseView.from_options(options),
        release,
        built,
        FakeEngine(),
        signer=signer,
        announce=said.append,
    )
    assert written == []
    assert any("not composed" in line for line in said), said
    assert not (release / "demo-1.2.3-linux-x86_64-cpu-auto").exists()


def test_assemble_without_an_engine_publishes_the_levels_and_says_what_is_missing(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`release assemble` composes like a one-shot release where it can reach an Engine;
    on a machine without one the levels go out alone, with a warning naming the folder."""

    def unreachable() -> Engine:
        raise DockerUnavailableError("cannot reach the Docker Engine: test")

    monkeypatch.setattr(Engine, "connect", staticmethod(unreachable))
    options = _options(project)
    signer = Signer(SecretKey.generate(), False, "test key")
    warned: list[str] = []
    written = compose_where_possible(
        ReleaseView.from_options(options),
        project,
        _built(options, LEVELS),
        signer,
        announce=print,
        warn=warned.append,
    )
    assert written == []
    assert warned == [
        "demo-1.2.3-linux-x86_64-cpu-auto not composed: no Docker Engine here "
        "(cannot reach the Docker Engine: test)"
    ]
    # One level: nothing to compose, and no Engine is asked for.
    one = _options(project, levels=("x86-64-v2",))
    assert (
        compose_where_possible(
            ReleaseView.from_options(one),
            project,
            _built(one, ("x86-64-v2",)),
            signer,
            announce=print,
            warn=warned.append,
        )
        == []
    )
    assert len(warned) == 1


SCRIPT = b"#!/bin/sh\necho owned\n"


def _forge_script_with_its_digest(folder: Path) -> None:
    """The review's recipe: a shell script in place of the dispatcher, its sha256 and size
    put into dispatcher.json (the seal left as it was)."""
    (folder / "dispatcher").write_bytes(SCRIPT)
    document = json.loads((folder / "dispatcher.json").read_text())
    document["info"].update(sha256=sha256_bytes(SCRIPT), size=len(SCRIPT))
    (folder / "dispatcher.json").write_text(json.dumps(document))


def _forge_and_seal_with_another_key(folder: Path) -> None:
    """The same, resealed with a key of the forger's own (they do not hold this one)."""
    _forge_script_with_its_digest(folder)
    document = json.loads((folder / "dispatcher.json").read_text())
    slot = f"dispatcher/{folder.name}"
    document["seal"] = seal(slot, document["info"], {"ORCHESTRATOR_CACHE_KEY": "forger"})
    (folder / "dispatcher.json").write_text(json.dumps(document))


def _replace_binary_only(folder: Path) -> None:
    (folder / "dispatcher").write_bytes(SCRIPT)


def _old_unsealed_record(folder: Path) -> None:
    """dispatcher.json as versions before the seal wrote it: the bare info."""
    document = json.loads((folder / "dispatcher.json").read_text())
    (folder / "dispatcher.json").write_text(json.dumps(document["info"]))


def _not_json(folder: Path) -> None:
    (folder / "dispatcher.json").write_text("not json")


def _binary_is_a_link(folder: Path) -> None:
    (folder / "elsewhere").write_bytes(DISPATCHER)
    (folder / "dispatcher").unlink()
    (folder / "dispatcher").symlink_to(folder / "elsewhere")


@pytest.mark.parametrize(
    "tamper",
    [
        _forge_script_with_its_digest,
        _forge_and_seal_with_another_key,
        _replace_binary_only,
        _old_unsealed_record,
        _not_json,
        _binary_is_a_link,
    ],
)
def test_a_tampered_dispatcher_cache_reaches_no_signature(
    project: Path, tmp_path: Path, tamper: Callable[[Path], None]
) -> None:
    signer = Signer(SecretKey.generate(), False, "test key")
    options = _publish_levels(project, tmp_path, signer)
    built = _built(options, LEVELS)
    release = options.artifacts_dir / built[0][1].release_dir
    image = built[0][1].image.reference
    _seed_dispatcher(options, image)
    tamper(dispatcher_cache.cache_folder(options.cache_dir, image))
    said: list[str] = []
    # The Engine lacks the image, so the entry is the only dispatcher there could be.
    written = compose.compose_release(
        ReleaseView.from_options(options),
        release,
        built,
        FakeEngine(),
        signer=signer,
        announce=said.append,
    )
    assert written == []
    assert any("ignoring the cached dispatcher" in line for line in said), said
    assert any("not composed" in line for line in said), said
    assert not (release / "demo-1.2.3-linux-x86_64-cpu-auto").exists()


def test_an_intact_entry_is_used_and_a_non_elf_one_is_refused_even_when_sealed(
    project: Path, tmp_path: Path
) -> None:
    """The seal says this machine wrote the entry; the bytes are still checked to be a
    freestanding x86_64 executable (a sealed entry from a buggy compile is not shipped)."""
    options = make_options(project)
    image = "orchestrator/toolchain:test"
    _seed_dispatcher(options, image)
    folder = dispatcher_cache.cache_folder(options.cache_dir, image)
    said: list[str] = []
    found = dispatcher_cache.read_cached(folder, image, said.append)
    assert found is not None and found[1] == DISPATCHER and said == []
    assert dispatcher_cache.read_cached(folder, "orchestrator/toolchain:other", said.append) is None
    assert "another image" in said[-1]

    script_info = found[0].model_copy(update={"sha256": sha256_bytes(SCRIPT), "size": len(SCRIPT)})
    (folder / "dispatcher").write_bytes(SCRIPT)
    entry = DispatcherCacheEntry(
        info=script_info, seal=seal(f"dispatcher/{folder.name}", script_info.dump())
    )
    write_record(folder / "dispatcher.json", entry)
    assert dispatcher_cache.read_cached(folder, image, said.append) is None
    assert "no ELF file" in said[-1]
