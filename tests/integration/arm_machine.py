"""An Arm machine for a training bundle's train.sh, on an x86_64 host that has none.

The machine is a Debian arm64 root filesystem (mmdebstrap, `--variant=extract`: only
the packages train.sh calls, unpacked, no maintainer script run) entered with chroot in
a bare container of the base image, with no network. Every program in it, from `sh`,
`uname` and `sha256sum` to the bundle's binaries, is an arm64 ELF that the kernel hands
to qemu-aarch64 through binfmt_misc: train.sh runs as on an Arm box, with no `qemu-aarch64
-L` in front of anything, and `uname -m` says aarch64.

binfmt_misc is registered inside the container's own user namespace (`unshare -Urm`;
Linux 6.7 and later give each user namespace its own binfmt_misc), never on the host,
whose /proc/sys/fs/binfmt_misc stays as it was. The emulator is the build image's own
qemu-aarch64 (statically linked, so it needs nothing from either root filesystem);
registration with the F flag opens it before the chroot. What this is not: an Arm CPU.
qemu emulates one (its /proc/cpuinfo says "ARMv8 Processor", which machine.txt records),
so this shows the bundle works on an aarch64 Linux userland, not how a real core profiles.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from orchestrator.model.binaries.elf import loader_needs

# What train.sh calls beyond the shell's builtins (uname, sha256sum, mkdir, rm, chmod, mv,
# dirname, head, env: coreutils; grep; tar); apt brings their libraries.
PACKAGES = ("dash", "coreutils", "grep", "tar")
MERGED_USR = "/usr/share/mmdebstrap/hooks/merged-usr"
# binfmt_misc's entry for aarch64 ELF executables (magic and mask of the ELF header, as
# qemu's own scripts/qemu-binfmt-conf.sh registers them), with the F flag.
_MAGIC = r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
_MASK = r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
EMULATOR = "/emulator/qemu-aarch64"
REGISTER = f":qemu-aarch64:M::{_MAGIC}:{_MASK}:{EMULATOR}:F"
_ENTER = f"""set -eu
mkdir -p /tmp/binfmt
mount -t binfmt_misc binfmt_misc /tmp/binfmt
printf '%s' '{REGISTER}' > /tmp/binfmt/register
exec chroot /machine /usr/bin/env -i PATH=/usr/bin:/bin "$@"
"""


def arm64_rootfs(dest: Path, mirror: str, suite: str = "trixie") -> Path:
    """A Debian arm64 root filesystem at `dest` (made here, on the host, as the base
    image's rootfs is)."""
    mode = "root" if os.geteuid() == 0 else "unshare"
    subprocess.run(
        [
            *("mmdebstrap", "--variant=extract", "--architectures=arm64", f"--mode={mode}"),
            *(f"--hook-dir={MERGED_USR}", f"--include={','.join(PACKAGES)}"),
            *(suite, str(dest), mirror),
        ],
        env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000"},
        capture_output=True,
        check=True,
        timeout=600,
    )
    return dest


def emulator_from(image: str, dest: Path) -> Path:
    """The image's /usr/bin/qemu-aarch64 copied to `dest`, checked to be static."""
    made = subprocess.run(
        ["docker", "create", image, "true"], capture_output=True, text=True, check=True
    )
    container = made.stdout.strip()
    try:
        subprocess.run(
            ["docker", "cp", f"{container}:/usr/bin/qemu-aarch64", str(dest)],
            capture_output=True,
            check=True,
        )
    finally:
        subprocess.run(["docker", "rm", container], capture_output=True, check=True)
    # a dynamic one would look for its loader in the Arm root filesystem
    assert loader_needs(dest).interpreter == "", f"{image}'s qemu-aarch64 is not static"
    return dest


def run_on_arm(
    base_image: str, rootfs: Path, emulator: Path, command: list[str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """`command` run in the Arm root filesystem (with PATH=/usr/bin:/bin and nothing else
    in its environment), in a bare container of `base_image` with no network."""
    enter = rootfs.parent / f"{rootfs.name}.enter.sh"
    enter.write_text(_ENTER)
    return subprocess.run(
        [
            *("docker", "run", "--rm", "--network", "none", "--cap-add", "SYS_ADMIN"),
            *("-v", f"{rootfs}:/machine", "-v", f"{emulator}:{EMULATOR}:ro"),
            *("-v", f"{enter}:/enter.sh:ro", base_image),
            *("unshare", "-Urm", "sh", "/enter.sh", *command),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
