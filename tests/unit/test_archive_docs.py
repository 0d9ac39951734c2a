"""The documents every archive carries (supply/archive_docs.py): the crate's top-level
README/LICENSE/COPYING/UNLICENSE/CHANGELOG files and the files its licence texts name,
read from the source snapshot with its paths and links treated as untrusted."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from orchestrator.host.packing import pack_tree
from orchestrator.supply.archive_docs import (
    MAX_NAMED_BYTES,
    crate_docs,
    link_target,
    named_paths,
    safe_parts,
)
from orchestrator.supply.archives import archive_members

# ripgrep's own words: its COPYING names the licences, whose files are UNLICENSE and
# LICENSE-MIT.
RIPGREP_COPYING = (
    b"This project is dual-licensed under the Unlicense and MIT licenses.\n\n"
    b"You may use this code under the terms of either license.\n"
)


def _snapshot(
    files: dict[str, bytes],
    links: dict[str, str] | None = None,
    *,
    folders: tuple[str, ...] = (),
    hard: dict[str, str] | None = None,
) -> bytes:
    """A source snapshot as host/source.py packs one, under src/, with hand-made entries
    (a snapshot may come from another machine's lock: nothing in it is trusted)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("", *folders):
            info = tarfile.TarInfo(f"src/{folder}".rstrip("/"))
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(f"src/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for kind, entries in ((tarfile.SYMTYPE, links), (tarfile.LNKTYPE, hard)):
            for name, target in (entries or {}).items():
                info = tarfile.TarInfo(f"src/{name}")
                info.type, info.linkname = kind, target
                tar.addfile(info)
    return buffer.getvalue()


def test_ripgreps_copying_brings_the_unlicense_and_the_mit_licence() -> None:
    source = _snapshot(
        {
            "COPYING": RIPGREP_COPYING,
            "UNLICENSE": b"This is free and unencumbered software\n",
            "LICENSE-MIT": b"The MIT License (MIT)\n",
            "README.md": b"# ripgrep\n",
            "Cargo.toml": b"[package]\n",
            "src/main.rs": b"fn main() {}\n",
        },
        folders=("src",),
    )
    assert [path for path, _ in crate_docs(source)] == [
        "COPYING",
        "LICENSE-MIT",
        "README.md",
        "UNLICENSE",
    ]


def test_files_a_licence_names_come_along_at_their_paths() -> None:
    license_text = (
        b"Apache License 2.0, see LICENSES/APACHE-2.0.txt and the NOTICE file.\n"
        b"Third-party terms: licenses/third-party.md. Not here: LICENSES/GPL.txt\n"
        b"https://www.apache.org/licenses/LICENSE-2.0\n"
    )
    source = _snapshot(
        {
            "LICENSE": license_text,
            "NOTICE": b"Copyright the authors\n",
            "LICENSES/APACHE-2.0.txt": b"Apache License\n",
            "licenses/third-party.md": b"third\n",
            "notes.txt": b"not named\n",
        },
        folders=("LICENSES", "licenses"),
    )
    docs = dict(crate_docs(source))
    assert sorted(docs) == [
        "LICENSE",
        "LICENSES/APACHE-2.0.txt",
        "NOTICE",
        "licenses/third-party.md",
    ]
    assert docs["NOTICE"] == b"Copyright the authors\n"


def test_names_read_in_a_licence_stay_inside_the_crate() -> None:
    """Untrusted names and links: nothing outside the crate, no folders, no hard links,
    nothing binary or huge, no endless links; a link that stays inside is followed."""
    license_text = b" ".join(
        [
            b"../outside /etc/passwd a/../../b LICENSES\\x",
            b"CLIMBS ABSOLUTE LOOP FOLDER HARD BLOB HUGE INNER",
        ]
    )
    source = _snapshot(
        {
            "LICENSE": license_text,
            "BLOB": b"\x7fELF\0\0binary",
            "HUGE": b"x" * (MAX_NAMED_BYTES + 1),
            "docs/notice.txt": b"the inner notice\n",
            "docs/FOLDER/x": b"x",
        },
        links={
            "CLIMBS": "../../etc/passwd",
            "ABSOLUTE": "/etc/passwd",
            "LOOP": "LOOP2",
            "LOOP2": "LOOP",
            "FOLDER": "docs/FOLDER",
            "INNER": "docs/./notice.txt",
        },
        folders=("docs", "docs/FOLDER"),
        hard={"HARD": "src/docs/notice.txt"},
    )
    assert dict(crate_docs(source)) == {
        "LICENSE": license_text,
        "INNER": b"the inner notice\n",
    }


def test_a_top_level_licence_that_links_inside_the_crate_is_packed_as_a_file() -> None:
    source = _snapshot(
        {"LICENSES/MIT.txt": b"MIT\n", "README.md": b"# demo\n"},
        links={"LICENSE": "LICENSES/MIT.txt", "CHANGELOG.md": "../CHANGELOG.md"},
        folders=("LICENSES",),
    )
    assert crate_docs(source) == [("LICENSE", b"MIT\n"), ("README.md", b"# demo\n")]


def test_a_crate_packed_for_real_gives_the_same_docs(tmp_path: Path) -> None:
    crate = tmp_path / "crate"
    (crate / "LICENSES").mkdir(parents=True)
    (crate / "COPYING").write_bytes(b"See LICENSES/MIT.txt and UNLICENSE.\n")
    (crate / "UNLICENSE").write_bytes(b"unlicense\n")
    (crate / "LICENSES" / "MIT.txt").write_bytes(b"mit\n")
    (crate / "LICENSE").symlink_to("LICENSES/MIT.txt")
    source = pack_tree(crate, prefix="src", mtime=1, uid=1000, keep_inner_symlinks=True)
    assert crate_docs(source) == [
        ("COPYING", b"See LICENSES/MIT.txt and UNLICENSE.\n"),
        ("LICENSE", b"mit\n"),
        ("LICENSES/MIT.txt", b"mit\n"),
        ("UNLICENSE", b"unlicense\n"),
    ]


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("LICENSE", ("LICENSE",)),
        ("./LICENSES/MIT.txt", ("LICENSES", "MIT.txt")),
        ("../LICENSE", None),
        ("/etc/passwd", None),
        ("a/../b", None),
        ("a\\b", None),
        ("", None),
        ("/".join("a" * 8), None),  # deeper than an archive may hold
    ],
)
def test_safe_parts(path: str, parts: tuple[str, ...] | None) -> None:
    assert safe_parts(path) == parts


@pytest.mark.parametrize(
    ("at", "linkname", "target"),
    [
        (("LICENSE",), "LICENSES/MIT.txt", ("LICENSES", "MIT.txt")),
        (("docs", "LICENSE"), "../LICENSE-MIT", ("LICENSE-MIT",)),
        (("LICENSE",), "../LICENSE", None),  # the crate's parent: a workspace's file
        (("docs", "LICENSE"), "../../x", None),
        (("LICENSE",), "/usr/share/common-licenses/MIT", None),
    ],
)
def test_link_target(at: tuple[str, ...], linkname: str, target: tuple[str, ...] | None) -> None:
    assert link_target(at, linkname) == target


def test_named_paths_reads_words_and_paths() -> None:
    text = b"under the Unlicense (see COPYING.LESSER), or LICENSES/MIT.txt. Also notice."
    top = ["COPYING.LESSER", "Cargo.toml", "NOTICE", "UNLICENSE", "src"]
    assert named_paths(text, top) == ["UNLICENSE", "COPYING.LESSER", "LICENSES/MIT.txt", "NOTICE"]


def test_a_doc_never_turns_a_binary_into_a_folder(tmp_path: Path) -> None:
    binary = tmp_path / "demo"
    binary.write_bytes(b"\x7fELF")
    members = archive_members(
        [binary], [("demo/NOTICE", b"n"), ("LICENSE", b"l")], [("demo", b"extra")]
    )
    assert [(m.path, m.executable) for m in members] == [("LICENSE", False), ("demo", True)]
