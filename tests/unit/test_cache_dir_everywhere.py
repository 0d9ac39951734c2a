"""Every command that uses the host cache finds it where build.cache_dir's declaration
says: --cache-dir, else each environment variable the declaration names, else the default.

`reproduce` and `vault import/export` once read only --cache-dir and silently used the
shared default vault. The test walks the typer app: a command that gains a cache (a
--cache-dir option or a --config, whose Options carry one) without a case here fails it.
Docker is down throughout, so each case stops at the Engine at the latest.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner, Result

from orchestrator.cli import app
from orchestrator.config.declarations.settings import SETTINGS_BY_KEY
from orchestrator.config.resolve.options import resolve, resolve_cache_dir
from orchestrator.host.cachedir import CACHE_MARKER
from orchestrator.host.vault import Vault
from orchestrator.model.documents.lockfile import blobs

from .conftest import plan_for, write_config
from .test_cli_bad_input import docker_down  # noqa: F401 (a fixture)
from .test_lockfile import lock_for

runner = CliRunner()
ENV_NAMES = SETTINGS_BY_KEY["build.cache_dir"].env_names


@dataclass
class Case:
    """How to run one command so that it reaches its cache, and what shows it did."""

    args: Callable[[Path, Path, pytest.MonkeyPatch], list[str]]  # (project, cache, mp)
    used: Callable[[Result, Path], bool]  # (result, cache): the command used that cache


def _config(project: Path) -> str:
    return str(project / "orchestrator.toml")


def _marked(_result: Result, cache: Path) -> bool:
    return (cache / CACHE_MARKER).is_file()


def _key_in(_result: Result, cache: Path) -> bool:
    """A throwaway signing key is made in <cache>/keys when no key is configured."""
    return any((cache / "keys").glob("*.key"))


def _named(result: Result, cache: Path) -> bool:
    return str(cache) in result.output.replace("\n", "")


def _unsigned_release(project: Path) -> Path:
    release = project / "artifacts" / "demo-1.2.3"
    release.mkdir(parents=True)
    document = lock_for(plan_for(resolve(project / "orchestrator.toml", env={})))
    (release / "release.lock").write_text(json.dumps(document.dump(), indent=1) + "\n")
    return release


def _reproduce(project: Path, cache: Path, _mp: pytest.MonkeyPatch) -> list[str]:
    release = _unsigned_release(project)
    document = lock_for(plan_for(resolve(project / "orchestrator.toml", env={})))
    for digest in blobs(document):  # read_locked asks only whether the vault has them
        blob = Vault(cache / "vault").path(digest)
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_text("stand-in\n")
    crate = str(project / "crate")
    return ["reproduce", str(release), "--trust-unsigned", "--source", crate]


def _vault_import(project: Path, _cache: Path, _mp: pytest.MonkeyPatch) -> list[str]:
    blob = b"one blob\n"
    archive = project / "vault.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (
            ("vault-export.json", b'{"lockfile": "release.lock", "blobs": []}'),
            (f"sha256/{hashlib.sha256(blob).hexdigest()}", blob),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return ["vault", "import", str(archive)]


def _vault_export(project: Path, cache: Path, mp: pytest.MonkeyPatch) -> list[str]:
    release = _unsigned_release(project)
    staged = project / "blob"
    staged.write_text("the one input\n")
    digest = Vault(cache / "vault").put(staged)  # only this cache's vault has it
    mp.setattr("orchestrator.model.documents.lockfile.blobs", lambda _doc: {digest: "the input"})
    return ["vault", "export", str(release), str(project / "out.tar")]


def _bench(project: Path, _cache: Path, mp: pytest.MonkeyPatch) -> list[str]:
    write_config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["x"]]\n[bench]\ncommand = ["b"]\n',
    )
    artifact = project / "artifacts" / "demo-1.2.3" / "demo-1.2.3-linux-x86_64-cpu"
    mp.setattr(
        "orchestrator.execute.verdict.bench.locate", lambda *_a: SimpleNamespace(artifact=artifact)
    )
    return ["bench", "-c", _config(project)]


def _clean(project: Path, cache: Path, _mp: pytest.MonkeyPatch) -> list[str]:
    cache.mkdir(parents=True)
    (cache / "thesis.tex").write_text("not a cache\n")  # refused (12), naming the folder
    return ["clean", "-c", _config(project), "--cache"]


def _doctor(project: Path, cache: Path, _mp: pytest.MonkeyPatch) -> list[str]:
    cache.mkdir(parents=True)  # its disk check names the folder
    return ["doctor", "-c", _config(project)]


CASES: dict[tuple[str, ...], Case] = {
    ("build",): Case(lambda p, _c, _m: ["build", "-c", _config(p)], _marked),
    ("release",): Case(lambda p, _c, _m: ["release", "-c", _config(p)], _marked),
    ("release", "assemble"): Case(
        lambda p, _c, _m: ["release", "assemble", str(p / "no-folder"), "-c", _config(p)], _key_in
    ),
    ("lock",): Case(lambda p, _c, _m: ["lock", "-c", _config(p)], _key_in),
    ("bench",): Case(_bench, _key_in),
    ("clean",): Case(_clean, _named),
    ("config",): Case(lambda p, _c, _m: ["config", "-c", _config(p), "--json"], _named),
    ("doctor",): Case(_doctor, _named),
    ("reproduce",): Case(_reproduce, _marked),
    ("vault", "import"): Case(_vault_import, lambda _r, c: any((c / "vault").rglob("sha256/*/*"))),
    ("vault", "export"): Case(_vault_export, lambda r, _c: r.exit_code == 0),
}


def _commands(command: object, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    subs = getattr(command, "commands", None)
    if not subs:
        return {path: command}
    found: dict[tuple[str, ...], object] = {}
    if getattr(command, "invoke_without_command", False) and path:  # `release` itself runs
        found[path] = command
    for name, sub in subs.items():
        found |= _commands(sub, (*path, name))
    return found


# Commands that read a config but never the host cache: `ci` writes a CI file, whose jobs
# set their own cache folder; `images load|save` read and write the folder they are given
# (the CI's), sealed with a key that is not in any cache.
WITHOUT_CACHE = frozenset({("ci",), ("images", "load"), ("images", "save")})


def test_every_command_with_a_cache_is_walked() -> None:
    with_cache = {
        path
        for path, command in _commands(typer.main.get_command(app)).items()
        if {"cache_dir", "config"} & {p.name for p in command.params}  # type: ignore[attr-defined]
    }
    assert with_cache >= WITHOUT_CACHE
    assert with_cache - WITHOUT_CACHE == set(CASES)
    assert {("reproduce",), ("vault", "import"), ("vault", "export")} <= with_cache


@pytest.mark.usefixtures("docker_down")
@pytest.mark.parametrize("env_name", ENV_NAMES)
@pytest.mark.parametrize("path", sorted(CASES), ids=" ".join)
def test_the_cache_comes_from_every_declared_variable(
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    path: tuple[str, ...],
    env_name: str,
) -> None:
    default = tmp_path / "xdg" / "orchestrator"  # docker_down's XDG_CACHE_HOME
    cache = tmp_path / f"cache-from-{env_name.lower()}"
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(env_name, str(cache))
    case = CASES[path]
    result = runner.invoke(app, case.args(project, cache, monkeypatch))
    assert "Traceback" not in result.output
    assert case.used(result, cache), result.output
    assert not default.exists(), result.output
    assert str(default) not in result.output


def test_the_flag_beats_the_variables_and_the_canonical_name_the_old_one(tmp_path: Path) -> None:
    env = {name: str(tmp_path / name) for name in ENV_NAMES}
    assert resolve_cache_dir(env) == tmp_path / ENV_NAMES[0]
    assert resolve_cache_dir(env, tmp_path / "flag") == tmp_path / "flag"
    assert resolve_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "orchestrator"
