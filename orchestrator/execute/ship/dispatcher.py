"""Build the dispatcher (dispatcher.c beside this module) in a toolchain image.

It is compiled with the image's own gcc, freestanding and static, in a container with no
network and no capabilities; the same source in the same image gives the same bytes, so
`reproduce` can build it again and compare. The result is checked to be what the
dispatcher promises: an x86_64 executable with no loader and no dynamic section.
"""

from __future__ import annotations

import io
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from orchestrator.errors import StepFailedError
from orchestrator.host.archive import ChunkReader, safe_extract
from orchestrator.host.packing import single_file_tar
from orchestrator.model.hashing import sha256_bytes, sha256_file
from orchestrator.runtime.api import ContainerSpec, EngineApi, OutputSink

SOURCE = Path(__file__).with_name("dispatcher.c")
WORKDIR = "/tmp/dispatcher"  # noqa: S108 - the throwaway container's own /tmp
OUTPUT_NAME = "dispatcher"
# No libc, no start files, no loader: raw syscalls only. No stack protector or unwind tables
# (nothing to support them), no PIE (nothing to relocate), no build id (it would only
# restate the bytes), no separate code segment (one page less), symbols stripped.
COMPILE_FLAGS: tuple[str, ...] = (
    "-Os",
    "-static",
    "-nostdlib",
    "-ffreestanding",
    "-fno-builtin",
    "-fno-stack-protector",
    "-fno-asynchronous-unwind-tables",
    "-fno-unwind-tables",
    "-fno-pie",
    "-no-pie",
    "-fcf-protection=none",
    "-fno-tree-loop-distribute-patterns",  # a copy loop must not become a call to memcpy
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wl,--build-id=none",
    "-Wl,-z,noexecstack",
    "-Wl,-z,norelro",
    "-Wl,-z,noseparate-code",
    "-Wl,--gc-sections",
    "-s",
)
_EM_X86_64 = "EM_X86_64"


@dataclass(frozen=True)
class DispatcherBuild:
    """One built dispatcher: its bytes' digest and size, and what made it."""

    path: Path
    sha256: str
    size: int
    image: str  # the toolchain image's reference
    source_sha256: str
    compiler: tuple[str, ...]  # the gcc command, as run in the container


def dispatcher_source() -> bytes:
    return SOURCE.read_bytes()


def compile_command(output: str = OUTPUT_NAME) -> tuple[str, ...]:
    return ("gcc", *COMPILE_FLAGS, "-o", output, "dispatcher.c")


def build_dispatcher(
    engine: EngineApi, image: str, dest: Path, *, on_output: OutputSink
) -> DispatcherBuild:
    """Compile the dispatcher in `image` and write it to `dest` (mode 0755)."""
    source = dispatcher_source()
    argv = compile_command()
    spec = ContainerSpec(image, network=False, purpose="dispatcher")
    with engine.container(spec) as box, tempfile.TemporaryDirectory() as scratch:
        if box.exec(["mkdir", "-p", WORKDIR], on_output=on_output) != 0:
            raise StepFailedError(f"cannot create {WORKDIR} in the {image} container")
        box.put_archive(WORKDIR, single_file_tar(f"{WORKDIR}/dispatcher.c", source))
        on_output("+ " + shlex.join(argv))
        code = box.exec(argv, on_output=on_output, workdir=WORKDIR)
        if code != 0:
            raise StepFailedError(
                f"the dispatcher did not compile in {image} (gcc exited {code})",
                hint="The step log holds gcc's messages; the image needs gcc for x86_64.",
            )
        built = f"{WORKDIR}/{OUTPUT_NAME}"
        written = safe_extract(ChunkReader(box.get_archive(built)), Path(scratch))
        if [p.as_posix() for p in written] != [OUTPUT_NAME]:
            raise StepFailedError(f"expected only {OUTPUT_NAME} in the archive of {built}")
        data = (Path(scratch) / OUTPUT_NAME).read_bytes()
    check_freestanding(data, image)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    dest.chmod(0o755)
    return DispatcherBuild(
        path=dest,
        sha256=sha256_file(dest),
        size=len(data),
        image=image,
        source_sha256=sha256_bytes(source),
        compiler=argv,
    )


def check_freestanding(data: bytes, image: str) -> None:
    """StepFailedError unless `data` is an x86_64 executable that needs no loader."""
    try:
        elf = ELFFile(io.BytesIO(data))
        machine, kind = elf["e_machine"], elf["e_type"]
        segments = {segment["p_type"] for segment in elf.iter_segments()}
    except (ELFError, ValueError, OSError) as exc:
        raise StepFailedError(f"the dispatcher built in {image} is no ELF file: {exc}") from exc
    needs = sorted(segments & {"PT_INTERP", "PT_DYNAMIC"})
    if machine != _EM_X86_64 or kind != "ET_EXEC" or needs:
        raise StepFailedError(
            f"the dispatcher built in {image} is not a static x86_64 executable "
            f"({machine}, {kind}{', ' + ', '.join(needs) if needs else ''})",
            hint="Its gcc must target x86_64 and link with -static -nostdlib -no-pie.",
        )
