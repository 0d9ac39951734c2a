"""The checks behind test_cli_bad_input.py, module by module: the toolchain image's word on
a target-cpu (asked once per image, kept in the cache), rustc's "not a recognized
processor" warning, GPU target tables, the Engine's socket and timeouts, and every reader
of a file someone else made."""

from __future__ import annotations

import http.server
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.config.resolve.toolchains import load_base_spec, load_toolchain
from orchestrator.errors import ConfigError, DockerUnavailableError, StepFailedError
from orchestrator.execute.steps import toolchain
from orchestrator.execute.steps.commands import cargo
from orchestrator.execute.steps.toolchain import TARGET_CPUS_CACHE, parse_target_cpus
from orchestrator.flavors.gpu import (
    DEFAULT_CUDA_TARGETS,
    DEFAULT_ROCM_TARGETS,
    KNOWN_CUDA_TARGETS,
    KNOWN_ROCM_TARGETS,
    cuda_embedded,
    cuda_supported,
)
from orchestrator.model.documents.cache_records import ProfileSidecar, VariantsRecord
from orchestrator.model.documents.lockfile import LockfileError, read_lock
from orchestrator.model.documents.records import BuildManifest, RecordError, read_record
from orchestrator.model.documents.release_summary import ReleaseSummary
from orchestrator.runtime.engine import API_TIMEOUT_S, Engine
from orchestrator.runtime.reach import _endpoint
from orchestrator.supply.minisign import PublicKey, SecretKey, SigningError, VerificationError

from .execute_rig import answers, make_options, make_rig
from .fakes import FakeEngine
from .test_flavors import NVCC_LIST
from .test_toolchain import BOLT_22, PROFDATA_22, RUSTC_VV

# `rustc --print target-cpus` of rustc 1.96 for x86_64, shortened.
TARGET_CPUS = """Available CPUs for this target:
    native                  - Select the CPU of the current host (currently znver3).
    alderlake
    haswell
    skylake
    skylake-avx512
    x86-64                  - This is the default target processor for this target.
    x86-64-v2
    x86-64-v3
    x86-64-v4
    znver4
"""
ARM_CPUS = "Available CPUs for this target:\n    generic\n    neoverse-n1\n    neoverse-v2\n"


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _toolchain_answers(cpus: str = TARGET_CPUS) -> FakeEngine:
    return FakeEngine(
        responder=answers(
            ("--print target-cpus", 0, cpus.splitlines()),
            ("-vV", 0, RUSTC_VV.splitlines()),
            ("cargo -V", 0, ["cargo 1.96.0"]),
            ("profdata", 0, PROFDATA_22.splitlines()),
            ("bolt", 0, BOLT_22.splitlines()),
        )
    )


def _asked(engine: FakeEngine) -> list[tuple[str, ...]]:
    return [a for box in engine.containers for a in box.argvs if "target-cpus" in a]


# -- 4. target-cpu: the toolchain image's rustc decides ----------------------------------
def test_parse_target_cpus() -> None:
    cpus = parse_target_cpus(TARGET_CPUS)
    assert cpus[:3] == ["native", "alderlake", "haswell"]
    assert "x86-64" in cpus and "Available" not in cpus
    assert parse_target_cpus("") == []


def test_a_cpu_rustc_lacks_fails_before_compiling_with_a_suggestion(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, target_cpu="skylak")
    engine = _toolchain_answers()
    rig = make_rig(options, stack, tmp_path, engine=engine)
    with pytest.raises(ConfigError) as caught:
        toolchain.toolchain_check(rig.pipeline, rig.log)
    error = caught.value
    assert error.exit_code == 10
    assert "target-cpu 'skylak' is not a CPU that rustc 1.96.0 knows" in error.message
    assert "x86_64-unknown-linux-gnu; did you mean 'skylake'?" in error.message
    rustc = rig.pipeline.plan.toolchain.tool("rustc")
    target = ("--target", "x86_64-unknown-linux-gnu")
    assert _asked(engine) == [(rustc, "--print", "target-cpus", *target)]


def test_the_cpu_list_is_asked_once_per_image(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, target_cpu="znver4")
    first = _toolchain_answers()
    rig = make_rig(options, stack, tmp_path, engine=first)
    toolchain.toolchain_check(rig.pipeline, rig.log)
    assert rig.log.detail == "LLVM 22 everywhere; rustc knows target-cpu znver4"
    assert len(_asked(first)) == 1
    cached = options.cache_dir / TARGET_CPUS_CACHE
    [record] = [json.loads(p.read_text()) for p in cached.iterdir()]
    assert record["image"] == "sha256:t" and "znver4" in record["cpus"]

    again = _toolchain_answers(cpus="")  # would list nothing: must not be asked
    rig = make_rig(options, stack, tmp_path, engine=again)
    toolchain.toolchain_check(rig.pipeline, rig.log)
    assert _asked(again) == []

    other_image = _toolchain_answers()
    rig = make_rig(options, stack, tmp_path, engine=other_image)
    rig.pipeline.state.image = replace(rig.pipeline.image, id="sha256:other")
    toolchain.toolchain_check(rig.pipeline, rig.log)
    assert len(_asked(other_image)) == 1  # another image: another rustc


def test_a_damaged_cpu_cache_is_asked_again(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, target_cpu="haswell")
    rig = make_rig(options, stack, tmp_path, engine=_toolchain_answers())
    toolchain.toolchain_check(rig.pipeline, rig.log)
    [path] = list((options.cache_dir / TARGET_CPUS_CACHE).iterdir())
    for damage in ("{", "[]", '{"image": "sha256:t", "cpus": "haswell"}'):
        path.write_text(damage)
        engine = _toolchain_answers()
        rig = make_rig(options, stack, tmp_path, engine=engine)
        toolchain.toolchain_check(rig.pipeline, rig.log)
        assert len(_asked(engine)) == 1, damage


def test_names_every_rustc_knows_are_not_asked(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    for cpu in ("x86-64", "x86-64-v2", "x86-64-v4", "native"):
        engine = _toolchain_answers(cpus="")
        rig = make_rig(make_options(project, target_cpu=cpu), stack, tmp_path, engine=engine)
        toolchain.toolchain_check(rig.pipeline, rig.log)
        assert _asked(engine) == [], cpu


def test_an_arm_cpu_is_asked_of_the_arm_target(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, target_cpu="neoverse-n3")
    engine = _toolchain_answers(cpus=ARM_CPUS)
    rig = make_rig(options, stack, tmp_path, flavor="aarch64", engine=engine)
    with pytest.raises(ConfigError, match=r"aarch64-unknown-linux-gnu; did you mean 'neoverse-n1'"):
        toolchain.toolchain_check(rig.pipeline, rig.log)
    assert _asked(engine)[0][-2:] == ("--target", "aarch64-unknown-linux-gnu")


def test_a_rustc_that_lists_no_cpu_is_a_step_failure(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, target_cpu="haswell")
    rig = make_rig(options, stack, tmp_path, engine=_toolchain_answers(cpus="Available:\n"))
    with pytest.raises(StepFailedError, match="listed no CPU"):
        toolchain.toolchain_check(rig.pipeline, rig.log)
    assert not (options.cache_dir / TARGET_CPUS_CACHE).exists()  # nothing cached


def test_rustc_ignoring_the_target_cpu_fails_the_build(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    warning = "warning: 'skylak' is not a recognized processor for this target (ignoring processor)"
    engine = FakeEngine(responder=answers(("cargo", 0, ["   Compiling demo v1.2.3", warning])))
    rig = make_rig(make_options(project), stack, tmp_path, engine=engine)
    release = rig.pipeline.plan.variants["release"].build
    with pytest.raises(ConfigError) as caught:
        cargo(rig.pipeline.box, release, rig.log, "build-release")
    assert caught.value.exit_code == 10
    assert "step build-release: rustc does not know target-cpu 'skylak'" in caught.value.message
    assert "generic CPU" in caught.value.message
    quiet = FakeEngine(responder=answers(("cargo", 0, ["   Compiling demo v1.2.3"])))
    rig = make_rig(make_options(project), stack, tmp_path, engine=quiet)
    assert "Compiling" in cargo(rig.pipeline.box, release, rig.log, "build-release")


# -- 6. GPU target tables ---------------------------------------------------------------
def test_the_gpu_tables_hold_what_the_compilers_and_defaults_name() -> None:
    assert set(DEFAULT_CUDA_TARGETS) <= KNOWN_CUDA_TARGETS
    assert set(DEFAULT_ROCM_TARGETS) <= KNOWN_ROCM_TARGETS
    assert cuda_supported(NVCC_LIST) <= KNOWN_CUDA_TARGETS  # nvcc 12.4's own list
    assert {"sm_90a", "sm_100a", "sm_100f", "sm_120", "sm_121a"} <= KNOWN_CUDA_TARGETS
    assert {"gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201"} <= KNOWN_ROCM_TARGETS
    assert not {"sm_999", "sm_91", "compute_90"} & KNOWN_CUDA_TARGETS
    # the listing parsers read the suffixed names too
    assert cuda_supported("sm_90a\nsm_100f\n") == {"sm_90a", "sm_100f"}
    assert cuda_embedded("ELF file 1: a.1.sm_100f.cubin") == {"sm_100f"}


# -- 7. the Engine: which socket, and how long to wait ---------------------------------
def test_the_endpoint_names_docker_host_or_the_default_socket() -> None:
    assert _endpoint({"DOCKER_HOST": "tcp://10.0.0.2:2376"}) == "tcp://10.0.0.2:2376 (DOCKER_HOST)"
    assert _endpoint({}).startswith("unix:///var/run/docker.sock (the default socket")


def _short_socket_path(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    if len(str(path)) > 100:  # AF_UNIX paths are limited to ~107 bytes
        pytest.skip("temporary folder too deep for a unix socket")
    return path


def test_a_socket_that_never_answers_fails_within_the_connect_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _short_socket_path(tmp_path, "silent.sock")
    with socket.socket(socket.AF_UNIX) as silent:
        silent.bind(str(path))
        silent.listen(8)  # accepts connections, never reads or answers
        monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
        with pytest.raises(DockerUnavailableError) as caught:
            Engine.connect(timeout_s=1)
    assert caught.value.exit_code == 20
    assert caught.value.message == (
        f"cannot reach the Docker Engine at unix://{path} (DOCKER_HOST): no answer within 1 s"
    )


def test_a_missing_socket_and_a_dead_one_are_told_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nowhere.sock")
    with pytest.raises(DockerUnavailableError, match=r"nowhere\.sock \(DOCKER_HOST\): no such"):
        Engine.connect(timeout_s=1)
    dead = _short_socket_path(tmp_path, "dead.sock")
    with socket.socket(socket.AF_UNIX) as closed:
        closed.bind(str(dead))  # bound, never listening: refused
    monkeypatch.setenv("DOCKER_HOST", f"unix://{dead}")
    with pytest.raises(DockerUnavailableError, match="connection refused"):
        Engine.connect(timeout_s=1)


class _FakeDockerApi(http.server.BaseHTTPRequestHandler):
    """Answers the two calls `Engine.connect` makes: the version and a ping."""

    def do_GET(self) -> None:
        body = b"OK"
        if self.path.endswith("/version"):
            body = json.dumps({"ApiVersion": "1.44", "Version": "25.0.0"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self) -> str:
        return "unix"

    def log_message(self, *_args: object) -> None:
        pass


class _UnixHttpServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def test_after_the_engine_answers_calls_get_the_long_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _short_socket_path(tmp_path, "api.sock")
    with _UnixHttpServer(str(path), _FakeDockerApi) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
        try:
            engine = Engine.connect(timeout_s=1)
        finally:
            server.shutdown()
    # Silent exec streams (a fat-LTO link) read with this; builds pass no timeout at all.
    assert engine._client.api.timeout == API_TIMEOUT_S


# -- 7. keys ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"buildhost\n", "public key: not valid base64"),
        (b"", "not a minisign Ed25519 public key"),
        (b"untrusted comment: x\nRWQ=\n", "not a minisign Ed25519 public key"),
        (b"\x7fELF\x02\x01\x01\xff\xfe", "not a public key (not even text)"),
    ],
)
def test_a_public_key_file_that_is_no_key_is_named(
    tmp_path: Path, content: bytes, why: str
) -> None:
    path = tmp_path / "hostname"
    path.write_bytes(content)
    with pytest.raises(VerificationError) as caught:
        PublicKey.load(path)
    assert caught.value.message.startswith(f"{path}: ")
    assert why in caught.value.message
    assert caught.value.exit_code == 48


def test_a_secret_key_file_that_is_no_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "release.key"
    path.write_text(SecretKey.generate().public.to_text())  # the public half, by mistake
    with pytest.raises(SigningError) as caught:
        SecretKey.load(path, None)
    assert caught.value.message == f"{path}: not a minisign Ed25519 secret key"
    assert caught.value.exit_code == 47
    path.write_text("%%%")
    with pytest.raises(SigningError, match=r"release\.key: secret key: not valid base64"):
        SecretKey.load(path, None)


# -- 5. readers of files someone else made -------------------------------------------------
MALFORMED_JSON: dict[str, tuple[str | bytes, str]] = {
    "empty": ("", "not readable JSON"),
    "not JSON": ("{nope", "not readable JSON"),
    "not text": (b"\xff\xfe\x00", "not readable JSON"),
    "a list": ("[]", "expected a JSON object, got list"),
}


@pytest.mark.parametrize("model", [BuildManifest, ReleaseSummary, VariantsRecord, ProfileSidecar])
@pytest.mark.parametrize("case", sorted(MALFORMED_JSON))
def test_every_record_reader_names_the_file(
    tmp_path: Path, model: type[BuildManifest], case: str
) -> None:
    text, why = MALFORMED_JSON[case]
    path = tmp_path / "record.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(RecordError) as caught:
        read_record(path, model)
    assert caught.value.message.startswith(f"{path}: ")
    assert why in caught.value.message
    assert caught.value.exit_code == 59


@pytest.mark.parametrize(
    ("model", "document", "key"),
    [
        (VariantsRecord, {"image": 3, "variants": {}}, "image: Input should be a valid string"),
        (VariantsRecord, {"image": "i", "variants": []}, "variants: Input should be a valid"),
        (
            VariantsRecord,
            {"image": "i", "variants": {"pgo": {"sha256": "x"}}},
            "variants.pgo.size: Field required",
        ),
        (ProfileSidecar, {"sha256": "x", "size": "big", "details": {}}, "size: Input should be"),
        (ReleaseSummary, {"name": "d", "version": "1", "artifacts": [[]]}, "artifacts.0: Input"),
    ],
)
def test_record_readers_name_the_key(
    tmp_path: Path, model: type[VariantsRecord], document: dict[str, object], key: str
) -> None:
    path = tmp_path / "record.json"
    path.write_text(
        json.dumps({"schema": model.SCHEMA, "schema_version": model.VERSION, **document})
    )
    with pytest.raises(RecordError) as caught:
        read_record(path, model)
    assert caught.value.message.startswith(f"{path}: {key}")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"", "not a readable lockfile"),
        (b"\xff\xfe", "not a readable lockfile"),
        (b'{"schema": "orchestrator/lock", "schema_version": "1"}', "schema version '1'"),
        (b'{"schema": "orchestrator/lock", "schema_version": 1, "targets": [{}]}', "written_by"),
    ],
)
def test_the_lock_reader_names_the_file(tmp_path: Path, text: bytes, why: str) -> None:
    path = tmp_path / "release.lock"
    path.write_bytes(text)
    with pytest.raises(LockfileError) as caught:
        read_lock(path)
    assert str(path) in caught.value.message and why in caught.value.message
    assert "Write a new one with `orchestrator release`" not in caught.value.hint


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"\xff\xfe", "not valid TOML: not UTF-8 text"),
        (b"llvm_major = ", "not valid TOML"),
        (b"llvm_major = 22\ntools = [1]\n", "[tools] must be a table"),
        (b"llvm_major = []\n", "llvm_major: expected a positive integer"),
        (b"", "llvm_major: expected a positive integer"),
    ],
)
def test_the_toolchain_reader_names_the_file(tmp_path: Path, text: bytes, why: str) -> None:
    (tmp_path / "broken.toml").write_bytes(text)
    with pytest.raises(ConfigError) as caught:
        load_toolchain("broken", tmp_path)
    assert caught.value.message.startswith(f"{tmp_path / 'broken.toml'}: ")
    assert why in caught.value.message


@pytest.mark.parametrize(
    ("text", "why"),
    [(b"suite = ", "not valid TOML"), (b"\xff", "not UTF-8"), (b"", "invalid base spec")],
)
def test_the_base_spec_reader_names_the_file(tmp_path: Path, text: bytes, why: str) -> None:
    path = tmp_path / "base.toml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as caught:
        load_base_spec(path)
    assert caught.value.message.startswith(f"{path}: ") and why in caught.value.message


def test_a_config_path_that_is_a_folder_says_so(project: Path) -> None:
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        resolve(project, env={})
