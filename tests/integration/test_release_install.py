"""The release's archives and install.sh, for real: a two-level release (x86-64-v2 and
x86-64-v3) of the mixed-language fixture, installed in the bare Debian 11 and 13 containers
of the `distros` check, with no network and the release mounted read-only.

Bare Debian has no xz-utils (it is not Essential), so the containers get the host's `xz`
run through the host's own loader and libraries: a stand-in for `apt-get install xz-utils`.
Without it the installer must stop with a clear error, which is tested too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import REPO, managed_containers, orchestrator

pytestmark = pytest.mark.integration

FIXTURE = REPO / "tests" / "fixtures" / "mixed-language"
RELEASE = "mixed-language-0.1.0"
PORTABLE = f"{RELEASE}-linux-x86_64-cpu"
V3 = f"{PORTABLE}-v3"
AUTO = f"{PORTABLE}-auto"  # both levels and the dispatcher that picks one at each start
BINARY = "mixed-language"
# Small and fast: the archives are what these tests are about, not the optimizations.
CONFIG = """
[package]
crate = "."

[build]
source_date_epoch = 1700000000

[flavors.cpu]
levels = ["x86-64-v2", "x86-64-v3"]

[pgo]
enabled = false

[bolt]
enabled = false

[gate]
policy = "off"

[test]
enabled = false
reason = "the install tests are about the archives"

[release]
distro_check = "load"

[validate]
command = ["3000"]

[archive]
formats = ["tar.xz", "zip"]
include = ["doc/*.1"]

[[archive.generate]]
path = "notes/rounds.txt"
args = ["100"]
"""
# What the [archive] section adds to each archive, beside the binary and the docs.
EXTRAS = ("doc/mixed-language.1", "notes/rounds.txt")
# The crate's documents every archive carries, the -auto one included: NOTICE because
# COPYING names it.
DOCS = ("COPYING", "LICENSE", "NOTICE", "README.md", "UNLICENSE")
V3_FLAGS = ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")


def _host_is_v3() -> bool:
    flags = next(
        (
            line
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("flags")
        ),
        "",
    ).split()
    return all(flag in flags for flag in V3_FLAGS)


@pytest.fixture(scope="module")
def published(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("install") / "mixed-language"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    (project / "orchestrator.toml").write_text(CONFIG)
    (project / "README.md").write_text("# mixed-language\n")
    (project / "LICENSE").write_text("MIT\n")
    # As ripgrep's: COPYING names the Unlicense; a notice it names comes along too.
    (project / "COPYING").write_text("Dual-licensed under the Unlicense and MIT; see NOTICE.\n")
    (project / "UNLICENSE").write_text("This is free and unencumbered software\n")
    (project / "NOTICE").write_text("mixed-language notice\n")
    (project / "doc").mkdir()
    (project / "doc" / "mixed-language.1").write_text(".TH MIXED-LANGUAGE 1\n")
    artifacts = project.parent / "artifacts"
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    run = orchestrator(["release", *config, "--bench-runs", "0", "--allow-dirty"])
    assert run.returncode == 0, run.output
    assert managed_containers(docker_client) == []
    return artifacts / RELEASE


@pytest.fixture(scope="module")
def xz_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with `xz`: the host's binary, its libraries and loader, and a wrapper."""
    folder = tmp_path_factory.mktemp("xz")
    binary = shutil.which("xz")
    if binary is None:
        pytest.skip("the host has no xz to lend the bare containers")
    listing = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = folder / "lib"
    libs.mkdir()
    loader = ""
    for line in listing.splitlines():
        path = next((word for word in line.split() if word.startswith("/")), None)
        if path is None:
            continue
        shutil.copy(path, libs / Path(path).name)
        if "ld-linux" in path:
            loader = Path(path).name
    shutil.copy(binary, libs / "xz.bin")
    wrapper = folder / "bin" / "xz"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\nexec /opt/xz/lib/{loader} --library-path /opt/xz/lib /opt/xz/lib/xz.bin "$@"\n'
    )
    wrapper.chmod(0o755)
    return folder


def _distro_images(published: Path) -> dict[str, str]:
    """suite -> the bare image the release's `distros` check ran its binaries in."""
    manifest = json.loads((published / PORTABLE / "build.json").read_text())
    return {run["suite"]: run["image"] for run in manifest["portability"]["distros"]}


def _in_container(
    client: docker.DockerClient,
    image: str,
    release: Path,
    script: str,
    *,
    xz: Path | None,
    env: dict[str, str] | None = None,
) -> tuple[int, str]:
    volumes = {str(release): {"bind": "/release", "mode": "ro"}}
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if xz is not None:
        volumes[str(xz)] = {"bind": "/opt/xz", "mode": "ro"}
        path = f"/opt/xz/bin:{path}"
    container = client.containers.run(
        image,
        ["sh", "-c", script],
        detach=True,
        network_mode="none",
        volumes=volumes,
        environment={"HOME": "/root", "PATH": path, **(env or {})},
    )
    try:
        status = container.wait(timeout=300)
        return int(status["StatusCode"]), container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


INSTALL = (
    "sh /release/install.sh --from /release && "
    f'sha256sum "$HOME/.local/bin/{BINARY}" && "$HOME/.local/bin/{BINARY}" 3000'
)
# The -auto archive's level builds go beside bin/, where its dispatcher looks.
INSTALLED_LEVELS = (
    f'ORCHESTRATOR_LEVEL=show "$HOME/.local/bin/{BINARY}" && '
    f'sha256sum "$HOME/.local/libexec/{BINARY}"/*'
)


def _sha256(path: Path) -> str:
    return subprocess.run(
        ["sha256sum", str(path)], capture_output=True, text=True, check=True
    ).stdout[:64]


def test_the_release_has_deterministic_archives_listed_and_verified(published: Path) -> None:
    sums = (published / "SHA256SUMS").read_text()
    for folder in (PORTABLE, V3):
        archive = published / f"{folder}.tar.xz"
        assert f"{_sha256(archive)}  {archive.name}\n" in sums
        with tarfile.open(archive, "r:xz") as tar:
            names = sorted(tar.getnames())
            rounds = tar.extractfile(f"{folder}/notes/rounds.txt")
            assert rounds is not None and rounds.read().startswith(b"rounds: 100\nchecksum: ")
        files = [f"{folder}/{n}" for n in (BINARY, *DOCS, *EXTRAS)]
        folders = [folder, f"{folder}/doc", f"{folder}/notes"]
        assert names == sorted([*folders, *files])
        zipped = published / f"{folder}.zip"
        assert f"{_sha256(zipped)}  {zipped.name}\n" in sums
        with zipfile.ZipFile(zipped) as bundle:
            assert sorted(bundle.namelist()) == sorted([*(f"{f}/" for f in folders), *files])
            generated = bundle.read(f"{folder}/notes/rounds.txt")
        manifest = json.loads((published / folder / "build.json").read_text())
        assert [(g["path"], g["args"]) for g in manifest["generated"]] == [
            ("notes/rounds.txt", ["100"])
        ]
        assert (published / folder / "generated" / "notes" / "rounds.txt").read_bytes() == generated
    assert "  install.sh\n" in sums
    lock = json.loads((published / "release.lock").read_text())
    archives = {t["archive"]["file"]: t["archive"]["sha256"] for t in lock["targets"]}
    assert archives == {f"{f}.tar.xz": _sha256(published / f"{f}.tar.xz") for f in (PORTABLE, V3)}
    zips = {t["archive_zip"]["file"]: t["archive_zip"]["sha256"] for t in lock["targets"]}
    assert zips == {f"{f}.zip": _sha256(published / f"{f}.zip") for f in (PORTABLE, V3)}
    verified = orchestrator(["verify", str(published)])
    assert verified.returncode == 0, verified.output
    assert "archive" in verified.output


@pytest.mark.parametrize("suite", ["bullseye", "trixie"])
def test_install_sh_installs_the_best_archive_that_runs(
    published: Path, xz_shim: Path, docker_client: docker.DockerClient, suite: str
) -> None:
    image = _distro_images(published)[suite]
    # No level asked for: the -auto archive, whose dispatcher runs v3 on a CPU with the
    # flags and the portable build otherwise, at every start.
    best = "x86-64-v3" if _host_is_v3() else "x86-64-v2"
    compose = json.loads((published / AUTO / "compose.json").read_text())
    script = f"{INSTALL} && {INSTALLED_LEVELS}"
    code, output = _in_container(docker_client, image, published, script, xz=xz_shim)
    assert code == 0, output
    assert f"fetching {AUTO}.tar.xz" in output
    assert f"{compose['dispatcher']['sha256']}  /root/.local/bin/{BINARY}" in output
    assert "rounds: 3000" in output  # the dispatcher started a level build, which ran
    assert f"level={best} " in output
    for folder, level in ((PORTABLE, "x86-64-v2"), (V3, "x86-64-v3")):
        libexec = f"/root/.local/libexec/{BINARY}/{BINARY}-{level}"
        assert f"{_sha256(published / folder / BINARY)}  {libexec}" in output
    with tarfile.open(published / f"{AUTO}.tar.xz", "r:xz") as tar:
        names = {name.removeprefix(f"{AUTO}/") for name in tar.getnames()}
    assert names >= {*DOCS, f"bin/{BINARY}", "compose.json"}
    # --prefix is the root: its bin/ and libexec/, nothing beside it (/opt also holds the
    # xz shim's mount)
    script = (
        "sh /release/install.sh --from /release --prefix /opt/mixed && "
        f"/opt/mixed/bin/{BINARY} 3000 && ls /opt/mixed && "
        "test ! -e /opt/bin && test ! -e /opt/libexec && "
        f"sha256sum /opt/mixed/libexec/{BINARY}/*"
    )
    code, output = _in_container(docker_client, image, published, script, xz=xz_shim)
    assert code == 0, output
    assert "rounds: 3000" in output
    assert "\nbin\nlibexec\n" in output
    for folder, level in ((PORTABLE, "x86-64-v2"), (V3, "x86-64-v3")):
        libexec = f"/opt/mixed/libexec/{BINARY}/{BINARY}-{level}"
        assert f"{_sha256(published / folder / BINARY)}  {libexec}" in output
    # told that the CPU lacks AVX2: the portable archive
    code, output = _in_container(
        docker_client,
        image,
        published,
        INSTALL,
        xz=xz_shim,
        env={"ORCHESTRATOR_INSTALL_LEVEL": "v2"},
    )
    assert code == 0, output
    assert f"fetching {PORTABLE}.tar.xz" in output
    assert _sha256(published / PORTABLE / BINARY) in output


@pytest.fixture
def tampered(published: Path, tmp_path: Path) -> Iterator[Path]:
    copy = tmp_path / RELEASE
    shutil.copytree(published, copy)
    archive = copy / f"{PORTABLE}.tar.xz"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    yield copy


def test_install_sh_refuses_a_tampered_archive(
    tampered: Path, xz_shim: Path, docker_client: docker.DockerClient, published: Path
) -> None:
    image = _distro_images(published)["trixie"]
    script = 'sh /release/install.sh --cpu-level v2; echo "exit $?"; ls "$HOME/.local/bin" || true'
    code, output = _in_container(docker_client, image, tampered, script, xz=xz_shim)
    assert code == 0, output
    assert "not installed" in output and "exit 1" in output
    assert BINARY not in output.split("exit 1", 1)[1]


def test_install_sh_says_when_xz_is_missing(
    published: Path, docker_client: docker.DockerClient
) -> None:
    image = _distro_images(published)["bullseye"]
    script = 'sh /release/install.sh; echo "exit $?"; ls "$HOME/.local/bin" 2>&1 || true'
    code, output = _in_container(docker_client, image, published, script, xz=None)
    assert code == 0, output
    assert "xz is needed" in output and "exit 1" in output
    assert BINARY not in output.split("exit 1", 1)[1]


def test_a_reproduction_gives_the_same_archive_bytes(published: Path, tmp_path: Path) -> None:
    """Both levels, sharing the plain cargo build as the release did (one baseline build),
    with the time the release's own step records expect printed before it starts."""
    project = published.parent.parent / "mixed-language"
    workdir = tmp_path / "w"
    run = orchestrator(
        [
            "reproduce",
            str(published),
            "--source",
            str(project),
            "--workdir",
            str(workdir),
            "--reuse-images",
        ]
    )
    assert run.returncode == 0, run.output
    assert f"{V3}: build-baseline not run: same inputs as {PORTABLE}" in run.output
    assert "expected: about " in run.output
    for folder in (PORTABLE, V3):
        for suffix in (".tar.xz", ".zip"):
            rebuilt = next(workdir.rglob(f"{folder}{suffix}"))
            assert rebuilt.read_bytes() == (published / f"{folder}{suffix}").read_bytes()
    report = {r["artifact"]: r for r in json.loads((workdir / "reproduce.json").read_text())}
    assert all(r["identical"] and r["expected_seconds"] is not None for r in report.values())
