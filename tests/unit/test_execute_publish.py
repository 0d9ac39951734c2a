"""The steps at the end of the pipeline through the fake Engine: GPU target checks,
validation, portability, the SBOM inventory, and extract + publish with a real key."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest

from orchestrator.errors import StepFailedError, ValidationError
from orchestrator.execute.ship import inventory, publish
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.verdict import device, validate
from orchestrator.flavors.gpu import DeviceCodeMissingError, GpuTargetError
from orchestrator.host.bootstrap import MANIFEST
from orchestrator.host.packing import single_file_tar
from orchestrator.host.source import CRATES_IO
from orchestrator.host.staging import staging_root
from orchestrator.model.documents.records import BuildManifest, GateInfo, read_record
from orchestrator.model.documents.run_logs import BUILD_RUN, BuildRun
from orchestrator.model.hashing import sha256_bytes
from orchestrator.model.layout import PATHS
from orchestrator.runtime.images import package_set_dir
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey, verify_file
from orchestrator.supply.sbom import SBOM_FILE, Crate, DebPackage

from .execute_rig import EITHER_SUM, LOCK, answers, make_options, make_rig
from .fakes import FakeEngine
from .publish_rig import extract_and_publish, ready_to_publish


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


# -- GPU targets and device code -----------------------------------------------------------
NVCC_VERSION = [
    "nvcc: NVIDIA (R) Cuda compiler driver",
    "Cuda compilation tools, release 12.8, V12.8.93",
]
NVCC_CODES = ["sm_50", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"]


def test_cuda_targets_are_checked_against_nvcc(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    engine = FakeEngine(
        responder=answers(("--version", 0, NVCC_VERSION), ("--list-gpu-code", 0, NVCC_CODES))
    )
    rig = make_rig(make_options(project), stack, tmp_path, flavor="cuda", engine=engine)
    device.gpu_targets(rig.pipeline, rig.log)
    assert rig.box.argvs == [("nvcc", "--version"), ("nvcc", "--list-gpu-code")]
    assert rig.pipeline.state.gpu == {
        "kind": "cuda",
        "requested": ["sm_80", "sm_86", "sm_89", "sm_90"],
        "compiler": "Cuda compilation tools, release 12.8, V12.8.93",
        "supported": sorted(NVCC_CODES),
    }
    assert rig.log.detail == "nvcc supports all 4 targets"


def test_a_target_nvcc_lacks_is_a_gpu_target_error(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    engine = FakeEngine(responder=answers(("--list-gpu-code", 0, ["sm_80", "sm_86"])))
    rig = make_rig(make_options(project), stack, tmp_path, flavor="cuda", engine=engine)
    with pytest.raises(
        GpuTargetError, match=r"cannot compile for sm_89, sm_90; it supports: sm_80, sm_86"
    ):
        device.gpu_targets(rig.pipeline, rig.log)


def test_cuda_device_code_is_listed_with_cuobjdump(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    listing = [
        f"ELF file    {i}: demo.{i}.{sm}.cubin"
        for i, sm in enumerate(["sm_80", "sm_86", "sm_89", "sm_90"])
    ]
    metadata = f"{PATHS.out}/cargo-metadata.json"  # a crate on no cudarc
    engine = FakeEngine(
        responder=answers(("cuobjdump", 0, listing)),
        archives={metadata: single_file_tar(metadata, b'{"packages": []}')},
    )
    rig = make_rig(make_options(project), stack, tmp_path, flavor="cuda", engine=engine)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    rig.pipeline.state.gpu = {"kind": "cuda"}
    device.device_code(rig.pipeline, rig.log)
    assert rig.box.argvs[1:] == [("cuobjdump", "--list-elf", f"{BIN_DIR}/optimized")]
    assert rig.pipeline.state.gpu == {
        "kind": "cuda",
        "binary": {
            "kind": "cuda",
            "checked_with": "cuobjdump --list-elf",
            "embedded": ["sm_80", "sm_86", "sm_89", "sm_90"],
        },
    }
    rig.engine.responder = answers(("cuobjdump", 0, listing[:1]))
    missing = make_rig(make_options(project), stack, tmp_path, flavor="cuda", engine=rig.engine)
    missing.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    with pytest.raises(DeviceCodeMissingError, match=r"no device code for sm_86, sm_89, sm_90"):
        device.device_code(missing.pipeline, missing.log)


def _offload_bundle(*ids: str) -> bytes:
    """A clang offload bundle header as flavors.gpu.offload_bundle_targets reads it."""
    header = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids))
    for entry in ids:
        header += struct.pack("<QQQ", 4096, 100, len(entry)) + entry.encode()
    return header


def test_rocm_targets_and_offload_bundles(project: Path, stack: ExitStack, tmp_path: Path) -> None:
    processors = [
        f"    {g}  - Select the {g} processor" for g in ("gfx906", "gfx90a", "gfx1030", "gfx1100")
    ]
    binary = (
        b"\x7fELF"
        + _offload_bundle(
            "host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"
        )
        + b"padding"
        + _offload_bundle("hipv4-amdgcn-amd-amdhsa--gfx1030", "hipv4-amdgcn-amd-amdhsa--gfx1100")
    )
    engine = FakeEngine(
        responder=answers(
            ("hipcc --version", 0, ["HIP version: 6.2.41134", "clang 17"]), ("llc", 0, processors)
        ),
        missing=lambda path: binary,
    )
    rig = make_rig(make_options(project), stack, tmp_path, flavor="rocm", engine=engine)
    device.gpu_targets(rig.pipeline, rig.log)
    gpu = rig.pipeline.state.gpu
    assert gpu is not None
    assert (gpu["compiler"], gpu["supported"]) == (
        "HIP version: 6.2.41134",
        ["gfx1030", "gfx1100", "gfx906", "gfx90a"],
    )
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    device.device_code(rig.pipeline, rig.log)
    assert rig.pipeline.state.gpu["binary"] == {  # type: ignore[index]
        "kind": "rocm",
        "checked_with": "clang offload bundle entries",
        "embedded": ["gfx1030", "gfx1100", "gfx90a"],
    }
    assert "code object: gfx90a" in rig.text
    assert list((rig.pipeline.scratch / "device-code").iterdir()) == []  # fetched copy removed


def test_device_steps_in_a_plan_for_no_gpu_are_an_internal_error(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(project), stack, tmp_path)
    with pytest.raises(StepFailedError, match="plan for no GPU"):
        device.gpu_targets(rig.pipeline, rig.log)


# -- validate and portability -----------------------------------------------------------
def test_without_a_validate_command_nothing_is_compared(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(project), stack, tmp_path)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    validate.validate(rig.pipeline, rig.log)
    assert rig.pipeline.state.validation == {"command": [], "compared": False}
    assert rig.log.detail == "nothing to compare"
    assert rig.engine.containers == []


def outputs(**files: bytes) -> FakeEngine:
    """An engine whose validate runs wrote these files ("baseline_0_stdout" is
    /build/out/validate/baseline-0.stdout; a stream not given is empty)."""

    def read(path: str) -> bytes:
        name = PurePosixPath(path).name.replace(".", "_").replace("-", "_")
        # The baseline's second run (the determinism check) prints what its first did.
        return files.get(name, files.get(name.replace("_again", ""), b""))

    return FakeEngine(missing=read)


CAPTURE_PREFIX = ("/bin/sh", "-c", 'o=$1; e=$2; shift 2; exec "$@" > "$o" 2> "$e"', "sh")


@pytest.mark.parametrize(
    ("tolerance", "got", "identical", "detail"),
    [
        (0.0, b"step 1\nloss: 0.3\n", True, "outputs identical"),
        (1e-3, b"step 1\nloss: 0.3000001\n", False, "within tolerance"),
    ],
)
def test_validate_compares_the_shipped_binary_with_the_baseline(
    project: Path,
    stack: ExitStack,
    tmp_path: Path,
    tolerance: float,
    got: bytes,
    identical: bool,
    detail: str,
) -> None:
    (project / "crate" / "model.bin").write_bytes(b"weights")
    options = make_options(
        project,
        validate_command=("eval", "--seed", "1"),
        validate_tolerance=tolerance,
        run_env=("MODE=fast",),
    )
    engine = outputs(baseline_0_stdout=b"step 1\nloss: 0.3\n", optimized_0_stdout=got)
    rig = make_rig(options, stack, tmp_path, engine=engine)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    validate.validate(rig.pipeline, rig.log)
    runs = [e for e in rig.box.execs if e.argv[0] == "/bin/sh"]
    out = "/build/out/validate"
    assert [e.argv for e in runs] == [
        (
            *CAPTURE_PREFIX,
            f"{out}/baseline-0.stdout",
            f"{out}/baseline-0.stderr",
            f"{BIN_DIR}/baseline/demo",
            "eval",
            "--seed",
            "1",
        ),
        (  # run again: the command must print the same twice
            *CAPTURE_PREFIX,
            f"{out}/baseline-0-again.stdout",
            f"{out}/baseline-0-again.stderr",
            f"{BIN_DIR}/baseline/demo",
            "eval",
            "--seed",
            "1",
        ),
        (
            *CAPTURE_PREFIX,
            f"{out}/optimized-0.stdout",
            f"{out}/optimized-0.stderr",
            f"{BIN_DIR}/optimized",
            "eval",
            "--seed",
            "1",
        ),
    ]
    # At the crate's root (relative paths to its files work), with [train] env.
    assert {(e.workdir, e.environment["MODE"]) for e in runs} == {(PATHS.src, "fast")}
    assert rig.pipeline.state.validation == {
        "command": ["eval", "--seed", "1"],
        "compared": True,
        "tolerance": tolerance,
        "identical": identical,
        "output_lines": 2,
        "stdout_bytes": 17,
        "stderr_bytes": 0,
    }
    assert rig.log.detail == detail


def test_differing_outputs_are_a_validation_error_with_a_diff(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, validate_command=("eval",))
    engine = outputs(
        baseline_0_stdout=b"same\nloss: 0.3\n", optimized_0_stdout=b"same\nloss: 0.4\n"
    )
    rig = make_rig(options, stack, tmp_path, engine=engine)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    with pytest.raises(ValidationError) as caught:
        validate.validate(rig.pipeline, rig.log)
    message = caught.value.message
    assert "stdout: 1 line(s) differ" in message
    assert "-loss: 0.3" in message and "+loss: 0.4" in message
    assert rig.pipeline.state.validation == {}


@pytest.mark.parametrize("tolerance", [0.0, 0.5])
def test_a_difference_inside_non_utf8_output_is_caught(
    project: Path, stack: ExitStack, tmp_path: Path, tolerance: float
) -> None:
    """Decoded with replacement characters, b"\\xff" and b"\\xfe" both read as U+FFFD: the
    old comparison called these equal. Bytes are compared now, and the diff shows them."""
    options = make_options(project, validate_command=("dump",), validate_tolerance=tolerance)
    engine = outputs(
        baseline_0_stdout=b"id: \xff\x00 1.0\n", optimized_0_stdout=b"id: \xfe\x00 1.0\n"
    )
    rig = make_rig(options, stack, tmp_path, engine=engine)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    with pytest.raises(ValidationError) as caught:
        validate.validate(rig.pipeline, rig.log)
    assert "\\xff" in caught.value.message and "\\xfe" in caught.value.message


def test_stderr_is_compared_on_its_own_and_a_trailing_byte_counts(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, validate_command=("run",))
    same = b"result 42\n"
    engine = outputs(
        baseline_0_stdout=same,
        optimized_0_stdout=same,
        baseline_0_stderr=b"warning: slow\n",
        optimized_0_stderr=b"warning: slow",
    )
    rig = make_rig(options, stack, tmp_path, engine=engine)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    with pytest.raises(ValidationError) as caught:
        validate.validate(rig.pipeline, rig.log)
    assert "stderr" in caught.value.message and "stdout" not in caught.value.message


def test_with_a_tolerance_only_numbers_may_differ(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, validate_command=("run",), validate_tolerance=0.1)
    engine = outputs(baseline_0_stdout=b"loss:  0.30\n", optimized_0_stdout=b"loss: 0.31\n")
    rig = make_rig(options, stack, tmp_path, engine=engine)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    with pytest.raises(ValidationError, match="beyond the tolerance"):
        validate.validate(rig.pipeline, rig.log)


# -- SBOM inventory ----------------------------------------------------------------------
METADATA = {
    "packages": [
        {"id": "demo 1.2.3", "name": "demo", "version": "1.2.3", "source": None, "license": None},
        {
            "id": "either 1.15.0",
            "name": "either",
            "version": "1.15.0",
            "source": CRATES_IO,
            "license": "MIT OR Apache-2.0",
        },
    ],
    "resolve": {
        "nodes": [
            {"id": "demo 1.2.3", "dependencies": ["either 1.15.0"]},
            {"id": "either 1.15.0", "dependencies": []},
        ]
    },
}
DPKG = ["gcc 4:14.2.0-1 amd64", "libc6 2.41-7 amd64", ""]


def test_sbom_reads_crates_from_cargo_metadata_and_packages_from_dpkg(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    (project / "crate" / "Cargo.lock").write_text(LOCK)
    engine = FakeEngine(
        responder=answers(("dpkg-query", 0, DPKG)),
        missing=lambda path: json.dumps(METADATA).encode(),
    )
    rig = make_rig(make_options(project), stack, tmp_path, engine=engine)
    plan, options = rig.pipeline.plan, rig.pipeline.options
    recorded = package_set_dir(
        plan.base, plan.packages, options.cache_dir, plan.apt_sources, plan.unpack
    )
    recorded.mkdir(parents=True)
    (recorded / MANIFEST).write_text(
        json.dumps([{"file": "gcc_4%3a14.2.0-1_amd64.deb", "sha256": "45" * 32, "size": 9}])
    )
    inventory.sbom(rig.pipeline, rig.log)
    state = rig.pipeline.state
    assert state.crates == [Crate("either", "1.15.0", "MIT OR Apache-2.0", EITHER_SUM, CRATES_IO)]
    assert state.packages == [
        DebPackage("gcc", "4:14.2.0-1", "amd64", "45" * 32),
        DebPackage("libc6", "2.41-7", "amd64", None),
    ]
    metadata_call = rig.box.execs[0]
    assert metadata_call.argv[:2] == ("sh", "-c")
    assert metadata_call.argv[2].endswith(f"> {PATHS.out}/cargo-metadata.json")
    argv = list(metadata_call.argv)
    assert argv[3:6] == ["sh", plan.toolchain.tool("cargo"), "metadata"]
    assert argv[argv.index("--filter-platform") + 1] == plan.rust_target
    assert {"--offline", "--locked"} <= set(argv)
    assert metadata_call.environment == {"CARGO_HOME": PATHS.cargo_home}
    assert rig.box.argvs[1][0] == "dpkg-query"
    assert rig.log.detail == "1 crates, 2 toolchain packages"


# -- extract and publish -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("shipped", "names"),
    [
        ("pgo-bolt", ["bolt.fdata", "pgo.profdata"]),
        ("pgo", ["bolt.unshipped.fdata", "pgo.profdata"]),
        ("release", ["bolt.unshipped.fdata", "pgo.unshipped.profdata"]),
    ],
)
def test_profiles_are_named_for_what_the_shipped_binary_holds(
    project: Path, tmp_path: Path, shipped: str, names: list[str]
) -> None:
    """A profile the shipped binary was not optimized with is still published (reproduce
    rebuilds every variant the gate compared), under a name that says so."""
    options = make_options(project)
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, Signer(SecretKey.generate(), True, "k"))
        state = rig.pipeline.state
        assert state.pgo is not None
        state.bolt_profile = replace(state.pgo)
        state.gate = GateInfo(policy="best", min_gain=0.01, metric="cycles", shipped=shipped)
        extract_and_publish(rig)
    published = (
        options.artifacts_dir / rig.pipeline.plan.release_dir / rig.pipeline.plan.artifact_dir
    )
    assert sorted(p.name for p in (published / "profiles").iterdir()) == names
    manifest = read_record(published / "build.json", BuildManifest)
    assert sorted(manifest.profiles) == names
    assert manifest.pgo is not None and manifest.pgo.shipped is (shipped != "release")


def test_extract_and_publish_assemble_sign_and_move_the_artifact(
    project: Path, tmp_path: Path
) -> None:
    options = make_options(project)
    key = SecretKey.generate()
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, Signer(key, True, "test key"))
        plan, state, staging = rig.pipeline.plan, rig.pipeline.state, rig.pipeline.staging
        reporter = rig.pipeline.reporter
        with pytest.raises(StepFailedError, match="publish runs before"):
            publish.publish(rig.pipeline, rig.log)
        with reporter.step("extract", "extract") as log:
            publish.extract(rig.pipeline, log)
        assert state.binary is not None and state.binary.parent == staging / plan.artifact_dir
        with reporter.step("publish", "publish") as log:
            publish.publish(rig.pipeline, log)
    published = options.artifacts_dir / plan.release_dir / plan.artifact_dir
    assert state.published == published
    names = sorted(p.name for p in published.iterdir())
    assert names == sorted(
        ["demo", "demo.minisig", "SHA256SUMS", "build.json", SBOM_FILE, "logs", "profiles"]
    )
    binary = published / "demo"
    assert binary.read_bytes() == f"binary {BIN_DIR}/optimized.bolt".encode()
    verify_file(binary, (published / "demo.minisig").read_text(), key.public)
    manifest = read_record(published / "build.json", BuildManifest)
    assert manifest == state.manifest
    assert manifest.artifact.sha256 == sha256_bytes(binary.read_bytes())
    assert manifest.artifact.optimizations == ["lto-fat", "pgo", "bolt"]
    assert set(manifest.variants) == {"baseline", "release", "pgo", "pgo-bolt"}
    # how the build went is in the unsigned logs/run.json, not in the signed build.json
    assert (manifest.steps, manifest.started_at, manifest.engine) == (None, None, None)
    run = read_record(published / BUILD_RUN, BuildRun)
    assert [s["name"] for s in run.steps] == ["extract"]
    assert run.artifact == plan.artifact_dir and run.finished_at
    assert (published / "profiles" / "pgo.profdata").read_bytes() == b"pgo profile"
    assert sorted(p.name for p in (published / "logs").iterdir()) == [
        "01-extract.log",
        "02-publish.log",
        "run.json",
    ]
    sums = (published / "SHA256SUMS").read_text()
    assert "logs/" not in sums
    assert f"{sha256_bytes(binary.read_bytes())}  demo" in sums
    assert json.loads((published / SBOM_FILE).read_text())["bomFormat"] == "CycloneDX"
    assert (published.parent / "SHA256SUMS").is_file()  # the release index
    assert not staging_root(options.artifacts_dir).exists()


def test_sbom_asks_cargo_metadata_for_the_flavors_features(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    cpu = replace(options.flavor_settings["cpu"], features=("simd", "fast"), default_features=False)
    options = replace(options, flavor_settings={**options.flavor_settings, "cpu": cpu})
    engine = FakeEngine(missing=lambda path: json.dumps(METADATA).encode())
    rig = make_rig(options, stack, tmp_path, engine=engine)
    crates, packages = inventory.inventory(rig.pipeline, rig.log)
    assert rig.box.argvs[0][-3:] == ("--features", "simd,fast", "--no-default-features")
    assert [c.name for c in crates] == ["either"] and packages == []
