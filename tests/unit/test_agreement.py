"""Two builds compared (supply/agreement.py): the first differing file, its sizes, the
first differing offset and the ELF section that holds it."""

from __future__ import annotations

import shutil
from pathlib import Path

from elftools.elf.elffile import ELFFile

from orchestrator.supply.agreement import BuildersDisagreeError, first_difference

HOST_ELF = Path(shutil.which("true") or "/bin/true").resolve()


def _pair(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Path]:
    first, second = tmp_path / "a", tmp_path / "b"
    for root in (first, second):
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
    return first, second


def test_identical_builds_agree(tmp_path: Path) -> None:
    first, second = _pair(tmp_path, {"tool": b"same", "share/data.txt": b"x" * 200_000})
    assert first_difference(first, second, ["tool", "share/data.txt"]) is None


def test_the_first_differing_file_in_name_order_with_its_offset(tmp_path: Path) -> None:
    first, second = _pair(tmp_path, {"b": b"0123456789", "c": b"same", "a": b"equal"})
    (second / "b").write_bytes(b"0123X56789")
    (second / "c").write_bytes(b"other")
    found = first_difference(first, second, ["c", "b", "a"])
    assert found is not None
    assert (found.file, found.sizes, found.offset, found.section) == ("b", (10, 10), 4, None)
    assert found.describe() == ("b: both 10 bytes; first differing byte at offset 4 (0x4)")


def test_a_longer_file_differs_where_the_shorter_ends_and_a_missing_one_is_named(
    tmp_path: Path,
) -> None:
    first, second = _pair(tmp_path, {"tool": b"x" * 70_000})
    (second / "tool").write_bytes(b"x" * 70_001)
    found = first_difference(first, second, ["tool"])
    assert found is not None and found.offset == 70_000 and found.sizes == (70_000, 70_001)
    (second / "tool").unlink()
    gone = first_difference(first, second, ["tool"])
    assert gone is not None and gone.describe() == "tool: only one build has it"


def test_an_elf_difference_names_its_section(tmp_path: Path) -> None:
    """A byte changed inside .rodata of a real ELF program (this host's `true`): the
    report names the section, as it would for a build script's random byte."""
    data = bytearray(HOST_ELF.read_bytes())
    with HOST_ELF.open("rb") as handle:
        rodata = ELFFile(handle).get_section_by_name(".rodata")
        assert rodata is not None
        offset = rodata["sh_offset"] + rodata["sh_size"] // 2
    first, second = _pair(tmp_path, {"bin/true": bytes(data)})
    data[offset] ^= 0xFF
    (second / "bin" / "true").write_bytes(bytes(data))
    found = first_difference(first, second, ["bin/true"])
    assert found is not None
    assert (found.offset, found.section) == (offset, ".rodata")
    assert f"at offset {offset} (0x{offset:x}), in ELF section .rodata" in found.describe()


def test_the_error_has_its_own_exit_code() -> None:
    assert BuildersDisagreeError("x").exit_code == 77
