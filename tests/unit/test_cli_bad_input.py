"""Bad input through the real CLI: each is refused with the documented exit code, a
message that names what is wrong (the file, the key, the value), and no traceback.

Docker is "down" in every test here (DOCKER_HOST names a socket that does not exist), so
a command that reached for Docker before reading its input would exit 20 instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from orchestrator.cli import app
from orchestrator.config.nesting import MAX_NESTING, NestingError, loads_json
from orchestrator.config.resolve.options import resolve
from orchestrator.errors import SourceError
from orchestrator.host.source import registry_crates
from orchestrator.host.vault import Vault
from orchestrator.model.documents.lockfile import blobs
from orchestrator.supply.minisign import SecretKey

from .conftest import plan_for, write_config
from .test_lockfile import lock_for

runner = CliRunner()


@pytest.fixture
def docker_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """DOCKER_HOST at a socket that does not exist; the cache inside the test's folder."""
    socket = f"unix://{tmp_path}/nowhere.sock"
    monkeypatch.setenv("DOCKER_HOST", socket)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for name in ("ORCHESTRATOR_SIGNING_KEY", "ORCHESTRATOR_CONFIG", "ORCHESTRATOR_TARGET_CPU"):
        monkeypatch.delenv(name, raising=False)
    return socket


def refused(result: Result, code: int, *names: str) -> str:
    """The output of a run that exited with `code` through the error path, naming `names`."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # not a crash
    assert "Traceback" not in result.output
    assert "error:" in result.output
    for name in names:
        assert name in result.output, f"{name!r} not in:\n{result.output}"
    return result.output


def cli(*args: str) -> Result:
    return runner.invoke(app, list(args))


# -- 4. a target-cpu rustc would only warn about ------------------------------------------
@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize(
    ("cpu", "expected"),
    [
        ("x86-64-v9", "the x86-64 psABI levels stop at v4"),
        ("x86-64-v5", "there is no level v5"),
        ("x86_64-v3", "did you mean 'x86-64-v3'?"),
        ("x86-64-v1", "level v1 is spelt 'x86-64'"),
    ],
)
def test_an_impossible_x86_level_fails_at_plan_time(project: Path, cpu: str, expected: str) -> None:
    config = str(project / "orchestrator.toml")
    result = cli("build", "--dry-run", "-c", config, "--target-cpu", cpu)
    refused(result, 10, f"target-cpu '{cpu}'", expected)


@pytest.mark.usefixtures("docker_down")
def test_an_impossible_level_in_a_release_fails_before_docker(project: Path) -> None:
    write_config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["x"]]\n'
        '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v7"]\n',
    )
    result = cli("release", "-c", str(project / "orchestrator.toml"), "--bench-runs", "0")
    output = refused(result, 10, "target-cpu 'x86-64-v7'", "stop at v4")
    assert "Docker" not in output


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize("cpu", ["x86-64", "x86-64-v4", "native", "znver4", "skylake"])
def test_real_cpu_names_pass_plan_time(project: Path, cpu: str) -> None:
    # Named CPUs are judged by the image's rustc (test_input_checks.py), not here.
    result = cli(
        "build", "--dry-run", "-c", str(project / "orchestrator.toml"), "--target-cpu", cpu
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rustflags"][0] == f"-Ctarget-cpu={cpu}"


# -- 5. files someone else made ---------------------------------------------------------
def _locked(project: Path, release: Path, change: dict[str, Any]) -> Path:
    """A release folder whose release.lock is a real one with `change` applied."""
    document = lock_for(plan_for(resolve(project / "orchestrator.toml", env={})))
    release.mkdir(parents=True)
    lock = release / "release.lock"
    lock.write_text(json.dumps({**document.dump(), **change}))
    return lock


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"targets": [{}]}, "targets.0.level: Field required"),
        ({"targets": "all"}, "targets: Input should be a valid list"),
        ({"targets": [[]]}, "targets.0: Input should be a valid dictionary"),
        ({"source": None}, "source: Input should be a valid dictionary"),
        ({"base": {"suite": 13}}, "base.suite: Input should be a valid string"),
    ],
)
def test_reproduce_of_a_malformed_lock_names_file_and_key(
    project: Path, tmp_path: Path, change: dict[str, Any], key: str
) -> None:
    lock = _locked(project, tmp_path / "demo-1.2.3", change)
    output = refused(cli("reproduce", str(lock.parent), "--trust-unsigned"), 53, str(lock), key)
    assert "Docker" not in output
    # Whoever reproduces did not write the lock: the hint says where an intact one is.
    assert "Write a new one with `orchestrator release`" not in output
    assert "published with the release" in output
    assert not (tmp_path / "demo-1.2.3.reproduce").exists()  # nothing written


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "not a readable lockfile"),
        ("{not json", "not a readable lockfile"),
        ("[]", "is not an orchestrator lockfile"),
        ('{"schema": "orchestrator/lock", "schema_version": 1}', "written_by: Field required"),
    ],
)
def test_reproduce_of_a_lock_that_is_no_lock(tmp_path: Path, text: str, why: str) -> None:
    lock = tmp_path / "release.lock"
    lock.write_text(text)
    refused(cli("reproduce", str(lock), "--trust-unsigned"), 53, str(lock), why)


@pytest.mark.usefixtures("docker_down")
def test_lock_check_of_a_malformed_lock_names_file_and_key(project: Path) -> None:
    release = project / "artifacts" / "demo-1.2.3"
    lock = _locked(project, release, {"targets": [{"level": 3}]})
    result = cli("lock", "--check", "-c", str(project / "orchestrator.toml"))
    refused(result, 53, str(lock), "targets.0.level: Input should be a valid string")


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"\xff\xfe[package]\n", "not valid TOML: not UTF-8 text"),
        (b"[package\n", "not valid TOML"),
        (b"package = [1]\n", "[package] must be a table"),
        (b'[package]\ncrate = "crate"\n[train]\nworkloads = "x"\n', "train.workloads: expected"),
        (b"", "missing required key 'package.crate'"),
    ],
)
def test_a_malformed_config_names_file_and_key(project: Path, text: bytes, why: str) -> None:
    config = project / "orchestrator.toml"
    config.write_bytes(text)
    refused(cli("build", "-c", str(config)), 10, str(config), why)


@pytest.mark.usefixtures("docker_down")
def test_a_cargo_toml_that_is_not_text_names_the_file(project: Path) -> None:
    manifest = project / "crate" / "Cargo.toml"
    manifest.write_bytes(b"\x00\xff\xfe")
    refused(cli("build", "-c", str(project / "orchestrator.toml")), 10, str(manifest), "UTF-8")


def _release_folder(root: Path) -> Path:
    """Enough of a release for `verify` to read its build.json: checksums and its key."""
    release = root / "demo-1.2.3"
    artifact = release / "demo-1.2.3-linux-x86_64-cpu"
    artifact.mkdir(parents=True)
    (release / "SHA256SUMS").write_text("")
    (release / "minisign.pub").write_text(SecretKey.generate().public.to_text())
    return release


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize(
    ("document", "key"),
    [
        (
            {"schema": "orchestrator/build", "schema_version": 2},
            "orchestrator_version: Field required",
        ),
        ([], "expected a JSON object, got list"),
        ("{", "not readable JSON"),
    ],
)
def test_verify_of_a_malformed_build_json_names_file_and_key(
    tmp_path: Path, document: object, key: str
) -> None:
    release = _release_folder(tmp_path)
    build_json = release / "demo-1.2.3-linux-x86_64-cpu" / "build.json"
    build_json.write_text(document if isinstance(document, str) else json.dumps(document))
    refused(cli("verify", str(release)), 59, str(build_json), key)


@pytest.mark.usefixtures("docker_down")
def test_verify_of_a_provenance_of_the_wrong_shape_is_a_failed_check(tmp_path: Path) -> None:
    release = _release_folder(tmp_path)
    (release / "demo-1.2.3-linux-x86_64-cpu").rmdir()
    (release / "provenance.intoto.jsonl").write_text("[]")
    output = refused(cli("verify", str(release)), 48, "provenance.intoto.jsonl (provenance)")
    assert "'list' object has no attribute" in output


# -- 6. contradictions and impossible GPU targets, at plan time ----------------------------
@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize("mode", ["lbr", "sample"])
def test_a_perf_bolt_mode_without_perf_access_is_refused(project: Path, mode: str) -> None:
    config = str(project / "orchestrator.toml")
    result = cli("build", "--dry-run", "-c", config, "--bolt-mode", mode, "--no-privileged")
    refused(result, 10, f"bolt.mode {mode} (from flag)", "profiling.privileges is off")
    allowed = cli(
        "build", "--dry-run", "-c", config, "--bolt-mode", "instrument", "--no-privileged"
    )
    assert allowed.exit_code == 0, allowed.output


@pytest.mark.usefixtures("docker_down")
def test_a_perf_bolt_mode_without_perf_access_in_the_file_names_both_sources(
    project: Path,
) -> None:
    config = write_config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["x"]]\n'
        '[bolt]\nmode = "lbr"\n[profiling]\nprivileges = false\n',
    )
    result = cli("build", "--dry-run", "-c", str(config))
    refused(result, 10, "bolt.mode lbr (from file orchestrator.toml)", "--no-privileged")


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize(
    ("flavor", "targets", "expected"),
    [
        ("cuda", '["sm_999"]', "'sm_999' is not a cuda target name"),
        ("cuda", '["sm_80", "sm_9O"]', "did you mean 'sm_90'?"),
        ("cuda", '["compute_90"]', "did you mean 'sm_90'?"),
        ("cuda", '["gfx90a"]', "'gfx90a' is a rocm target name"),
        ("rocm", '["gfx9400"]', "did you mean 'gfx940'?"),
        ("rocm", '["sm_90"]', "'sm_90' is a cuda target name, not a rocm target name"),
    ],
)
def test_an_unknown_gpu_target_fails_before_any_image(
    project: Path, flavor: str, targets: str, expected: str
) -> None:
    config = write_config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["x"]]\n'
        f"[flavors.{flavor}]\ngpu_targets = {targets}\n",
    )
    result = cli("build", "--flavor", flavor, "-c", str(config))
    output = refused(result, 10, f"flavors.{flavor}.gpu_targets", expected)
    assert "Docker" not in output  # the build did not get as far as Docker


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize(
    ("flavor", "targets"),
    [("cuda", '["sm_90a", "sm_100a", "sm_120f", "sm_50"]'), ("rocm", '["gfx942", "gfx1201"]')],
)
def test_real_gpu_targets_pass_plan_time(project: Path, flavor: str, targets: str) -> None:
    config = write_config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["x"]]\n'
        f"[flavors.{flavor}]\ngpu_targets = {targets}\n",
    )
    result = cli("build", "--dry-run", "--flavor", flavor, "-c", str(config))
    assert result.exit_code == 0, result.output
    assert "gpu-targets" in json.loads(result.output)["steps"]  # nvcc/hipcc still asked


# -- 7. Docker unreachable, keys that are no keys ---------------------------------------
def test_doctor_names_the_socket_and_reports_every_check(
    docker_down: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("orchestrator.runtime.doctor.shutil.which", lambda _name: None)
    result = cli("doctor")
    output = refused(result, 60, f"{docker_down} (DOCKER_HOST): no such socket")
    for check in ("buildkit", "mmdebstrap", "qemu-user (host)", "disk (cache)"):
        assert check in output
    for check in ("disk (docker)", "privileged containers", "perf in a container"):
        line = next(line for line in output.splitlines() if check in line)
        assert "skipped: Docker unreachable" in line


@pytest.mark.usefixtures("docker_down")
def test_verify_with_a_file_that_is_no_key_names_the_file(tmp_path: Path) -> None:
    release = _release_folder(tmp_path)
    hostname = tmp_path / "hostname"
    hostname.write_text("buildhost\n")
    result = cli("verify", str(release), "--key", str(hostname))
    refused(result, 48, f"{hostname}: public key: not valid base64", "publisher's minisign")


# -- 8. every input read before Docker is asked -----------------------------------------
def test_reproduce_of_a_missing_lockfile_reports_the_file_not_docker(
    docker_down: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    output = refused(cli("reproduce", "nope"), 53, f"no lockfile at {here / 'nope'}")
    assert "Docker" not in output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]  # no workdir, no cache


def test_reproduce_of_an_artifact_the_lock_lacks_reports_it_not_docker(
    docker_down: str, project: Path, tmp_path: Path
) -> None:
    lock = _locked(project, tmp_path / "demo-1.2.3", {})
    result = cli("reproduce", str(lock), "--artifact", "demo-9", "--trust-unsigned")
    output = refused(result, 53, "not in the lockfile: demo-9", "It locks: demo-1.2.3-linux")
    assert "Docker" not in output


def test_reproduce_with_inputs_missing_from_the_vault_reports_them_not_docker(
    docker_down: str, project: Path, tmp_path: Path
) -> None:
    lock = _locked(project, tmp_path / "demo-1.2.3", {})
    result = cli("reproduce", str(lock), "--trust-unsigned")
    output = refused(result, 53, "the vault lacks", "vault import")
    assert "Docker" not in output


def test_build_with_a_bad_signing_key_reports_the_key_not_docker(
    docker_down: str, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "keys" / "release.key"
    key.parent.mkdir()
    key.write_text("untrusted comment: not really\n%%%\n")
    monkeypatch.setenv("ORCHESTRATOR_SIGNING_KEY", str(key))
    output = refused(cli("build", "-c", str(project / "orchestrator.toml")), 47, str(key))
    assert "Docker" not in output


def test_release_with_a_bad_gpu_target_reports_it_not_docker(
    docker_down: str, project: Path
) -> None:
    config = write_config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["x"]]\n'
        '[build]\nflavors = ["cpu", "cuda"]\n[flavors.cuda]\ngpu_targets = ["sm_999"]\n',
    )
    output = refused(cli("release", "-c", str(config)), 10, "'sm_999' is not a cuda target")
    assert "Docker" not in output


def test_release_with_a_malformed_release_json_reports_it_not_docker(
    docker_down: str, project: Path
) -> None:
    summary = project / "artifacts" / "demo-1.2.3" / "release.json"
    summary.parent.mkdir(parents=True)
    summary.write_text('{"schema": "orchestrator/release", "schema_version": 2, "name": 1}')
    result = cli("release", "-c", str(project / "orchestrator.toml"))
    output = refused(result, 59, str(summary), "name: Input should be a valid string")
    assert "Docker" not in output


def test_bench_of_a_malformed_build_json_reports_it_not_docker(
    docker_down: str, project: Path
) -> None:
    config = write_config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["x"]]\n[bench]\ncommand = ["b"]\n',
    )
    build_json = project / "artifacts" / "demo-1.2.3" / "demo-1.2.3-linux-x86_64-cpu" / "build.json"
    build_json.parent.mkdir(parents=True)
    build_json.write_text('{"schema": "orchestrator/build", "schema_version": 2, "artifact": 1}')
    output = refused(cli("bench", "-c", str(config)), 59, str(build_json), "artifact")
    assert "Docker" not in output


def test_build_with_good_input_does_reach_for_docker(docker_down: str, project: Path) -> None:
    # The same commands with nothing wrong do get as far as Docker, which is down.
    refused(cli("build", "-c", str(project / "orchestrator.toml")), 20, docker_down)


# -- 9. names and nesting checked at the door (issue 28) --------------------------------
EVIL_TOOLCHAIN = "../../../tmp/x/evil"


def _reproducible(project: Path, release: Path, config_text: str) -> list[str]:
    """A release whose unsigned lock carries `config_text`, with every blob it names in
    the vault by name (read_locked asks no more): reproduce gets as far as the config."""
    document = lock_for(plan_for(resolve(project / "orchestrator.toml", env={})))
    document = document.model_copy(
        update={"config": document.config.model_copy(update={"text": config_text})}
    )
    release.mkdir(parents=True)
    (release / "release.lock").write_text(json.dumps(document.dump()))
    cache = release.parent / "cache"
    for digest in blobs(document):
        blob = Vault(cache / "vault").path(digest)
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_text("stand-in\n")
    source = str(project / "crate")
    return [
        "reproduce",
        str(release),
        "--trust-unsigned",
        "--source",
        source,
        "--cache-dir",
        str(cache),
    ]


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize("where", ["file", "flag", "env"])
def test_a_toolchain_that_is_a_path_is_refused_by_the_dry_run(
    project: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    config = project / "orchestrator.toml"
    args = ["build", "--dry-run", "-c", str(config)]
    if where == "file":
        config.write_text(config.read_text() + f'[build]\ntoolchain = "{EVIL_TOOLCHAIN}"\n')
    elif where == "flag":
        args += ["--toolchain", EVIL_TOOLCHAIN]
    else:
        monkeypatch.setenv("ORCHESTRATOR_TOOLCHAIN", EVIL_TOOLCHAIN)
    output = refused(cli(*args), 10, "is not a toolchain name", "Known toolchains: ")
    assert "orchestrator/cpu:" not in output  # no plan, no image tag made of a path


@pytest.mark.usefixtures("docker_down")
def test_reproduce_refuses_a_toolchain_path_in_the_locks_config_text(
    project: Path, tmp_path: Path
) -> None:
    text = f'[package]\ncrate = "crate"\n[build]\ntoolchain = "{EVIL_TOOLCHAIN}"\n'
    args = _reproducible(project, tmp_path / "r" / "demo-1.2.3", text)
    output = refused(cli(*args), 10, "is not a toolchain name", "rustc-web-1.96")
    assert "Docker" not in output  # refused while planning, before the Engine


@pytest.mark.usefixtures("docker_down")
def test_reproduce_refuses_a_lock_whose_config_names_another_toolchain_than_its_targets(
    project: Path, tmp_path: Path
) -> None:
    text = '[package]\ncrate = "crate"\n[build]\ntoolchain = "rustc-1.85"\n'
    args = _reproducible(project, tmp_path / "r" / "demo-1.2.3", text)
    output = refused(cli(*args), 53, "names toolchain 'rustc-1.85'", "'rustc-web-1.96'")
    assert "Docker" not in output


DEEP = 5000


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize("depth", [DEEP, MAX_NESTING + 1])
def test_a_config_nested_too_deeply_is_a_config_error(project: Path, depth: int) -> None:
    """5000 `[` once gave a RecursionError traceback; 65 levels parse, and are still refused."""
    config = project / "orchestrator.toml"
    config.write_text(config.read_text() + "[validate]\ncommand = " + "[" * depth + "]" * depth)
    refused(cli("config", "-c", str(config)), 10, str(config), "nested more than 64 levels")


@pytest.mark.usefixtures("docker_down")
def test_a_crate_manifest_nested_too_deeply_is_a_config_error(project: Path) -> None:
    manifest = project / "crate" / "Cargo.toml"
    manifest.write_text(manifest.read_text() + "x = " + "[" * DEEP + "\n")
    refused(cli("build", "--dry-run", "-c", str(project / "orchestrator.toml")), 10, str(manifest))


@pytest.mark.usefixtures("docker_down")
def test_an_env_workload_list_nested_too_deeply_is_a_config_error(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCHESTRATOR_TRAIN_WORKLOADS", "[" * DEEP + "]" * DEEP)
    refused(
        cli("config", "-c", str(project / "orchestrator.toml")), 10, "ORCHESTRATOR_TRAIN_WORKLOADS"
    )


@pytest.mark.usefixtures("docker_down")
def test_a_lock_nested_too_deeply_is_a_lockfile_error(tmp_path: Path) -> None:
    lock = tmp_path / "release.lock"
    lock.write_text("[" * 100_000)
    refused(cli("reproduce", str(lock), "--trust-unsigned"), 53, str(lock), "nested more than")


@pytest.mark.usefixtures("docker_down")
def test_reproduce_refuses_a_locks_config_text_nested_too_deeply(
    project: Path, tmp_path: Path
) -> None:
    text = '[package]\ncrate = "crate"\n[validate]\ncommand = ' + "[" * DEEP + "\n"
    args = _reproducible(project, tmp_path / "r" / "demo-1.2.3", text)
    output = refused(cli(*args), 10, "orchestrator.toml", "nested more than")
    assert "Docker" not in output


@pytest.mark.usefixtures("docker_down")
def test_verify_of_a_build_json_nested_too_deeply_is_a_record_error(tmp_path: Path) -> None:
    release = _release_folder(tmp_path)
    build_json = release / "demo-1.2.3-linux-x86_64-cpu" / "build.json"
    build_json.write_text('{"a": ' + "[" * 100_000)
    refused(cli("verify", str(release)), 59, str(build_json), "nested more than")


def test_a_cargo_lock_nested_too_deeply_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="nested more than"):
        registry_crates("x = " + "[" * DEEP + "\n")


def test_nesting_up_to_the_bound_is_read() -> None:
    at_bound = "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1)
    assert loads_json(f'{{"a": {at_bound}}}')["a"]
    with pytest.raises(NestingError):
        loads_json(f'{{"a": [{at_bound}]}}')


@pytest.mark.usefixtures("docker_down")
def test_a_symlinked_default_workdir_is_refused_and_its_target_untouched(
    project: Path, tmp_path: Path
) -> None:
    """`<release>.reproduce` -> elsewhere once put the workdir (and its removable marker)
    wherever the link pointed."""
    release = tmp_path / "r" / "demo-1.2.3"
    args = _reproducible(project, release, (project / "orchestrator.toml").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    release.with_name("demo-1.2.3.reproduce").symlink_to(elsewhere)
    refused(cli(*args), 12, "is a symlink", str(elsewhere), "never reached through a symlink")
    assert list(elsewhere.iterdir()) == []
    refused(cli(*args, "--workdir", str(release.with_name("demo-1.2.3.reproduce"))), 12)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize("verb", ["load", "save"])
def test_images_of_an_unknown_target_fail_before_docker(
    project: Path, tmp_path: Path, verb: str
) -> None:
    config = str(project / "orchestrator.toml")
    result = cli(
        "images", verb, str(tmp_path / "images"), "--target", "linux-x86_64-cpu-v9", "-c", config
    )
    refused(result, 10, "no target of this release is called 'linux-x86_64-cpu-v9'")
    assert not (tmp_path / "images").exists()
