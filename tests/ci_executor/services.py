"""The services the CI lends its jobs, emulated with folders: a cache keyed as actions/cache
and GitLab key it, GitHub's workflow artifacts, GitHub Releases (what the fake `gh`
records) and GitLab's generic package registry (an HTTP server on this machine). They are
the only state that jobs share."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.ci_executor.errors import WorkflowError

# What a tag's build must never restore: folders of the orchestrator cache that hold built
# binaries (the step cache; the compiled dispatcher).
BUILT_BINARY_FOLDERS = ("steps", "dispatcher")
# jobs side by side save into one index
_INDEX_LOCK = threading.Lock()


def copy_into(source: Path, target: Path) -> None:
    """`source` (a file or a folder) at `target`, merged into what is there, links kept."""
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


@dataclass(frozen=True)
class CacheEntry:
    scope: str  # GitHub: the ref that saved it; GitLab: "" (keys say the rest)
    key: str
    version: str  # GitHub: what the paths hash to (an entry is found only for the same paths)
    serial: int  # order of saving: the newest of several prefix matches wins
    folder: str


class CacheStore:
    """Entries by (scope, key, version), kept across runs in `root` (so a second run of
    the executor restores what the first saved)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.index = root / "index.json"

    def entries(self) -> list[CacheEntry]:
        if not self.index.is_file():
            return []
        return [CacheEntry(**entry) for entry in json.loads(self.index.read_text())]

    def lookup(
        self, scopes: Sequence[str], key: str, prefixes: Sequence[str], version: str
    ) -> tuple[CacheEntry | None, bool]:
        """The entry actions/cache restores and whether it is an exact hit: in each scope
        in turn, the exact key, then the newest entry whose key starts with the key, then
        with each restore key in order."""
        entries = [e for e in self.entries() if e.version == version]
        for scope in scopes:
            mine = sorted((e for e in entries if e.scope == scope), key=lambda e: -e.serial)
            exact = next((e for e in mine if e.key == key), None)
            if exact is not None:
                return exact, True
            for prefix in (key, *prefixes):
                found = next((e for e in mine if e.key.startswith(prefix)), None)
                if found is not None:
                    return found, False
        return None, False

    def save(self, scope: str, key: str, version: str, paths: Sequence[Path | None]) -> bool:
        """A new entry holding each existing path of `paths` (None: not there); False when
        one with that key exists (the CI keeps the first)."""
        with _INDEX_LOCK:
            entries = self.entries()
            if any((e.scope, e.key, e.version) == (scope, key, version) for e in entries):
                return False
            serial = max((e.serial for e in entries), default=0) + 1
            folder = self.root / f"entry-{serial}"
            for index, path in enumerate(paths):
                if path is not None:
                    copy_into(path, folder / f"p{index}")
            folder.mkdir(exist_ok=True)
            entries.append(CacheEntry(scope, key, version, serial, folder.name))
            self.index.write_text(json.dumps([e.__dict__ for e in entries], indent=1))
            return True

    def restore(self, entry: CacheEntry, paths: Sequence[Path], *, tag_build: bool) -> None:
        folder = self.root / entry.folder
        for index, path in enumerate(paths):
            stored = folder / f"p{index}"
            if not stored.exists():
                continue
            if tag_build:
                refuse_built_binaries(stored, path)
            copy_into(stored, path)


def refuse_built_binaries(stored: Path, path: Path) -> None:
    """A tag's build restores no built binaries: a cache folder named for them, at the
    path or anywhere below it, stops the run."""
    names = {path.name} | (
        {p.name for p in stored.rglob("*") if p.is_dir()} if stored.is_dir() else set()
    )
    held = sorted(names & set(BUILT_BINARY_FOLDERS))
    if held:
        raise WorkflowError(
            f"a tag's build restores {path} with {', '.join(held)}/: built binaries from a "
            "cache, which a release must never sign"
        )


class ArtifactStore:
    """GitHub's workflow artifacts of one run (upload-artifact v4): a name is uploaded
    once; a download gives the files without their modes, as the zip service does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def upload(self, name: str, files: Sequence[tuple[str, Path]]) -> None:
        if not re.fullmatch(r"[^\"':<>|*?\\/\r\n]+", name):
            raise WorkflowError(f"upload-artifact: the name {name!r} is not allowed")
        folder = self.root / name
        if folder.exists():
            raise WorkflowError(f"upload-artifact: an artifact named {name!r} exists (409)")
        for relative, source in files:
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, folder / relative)

    def names(self, pattern: str | None) -> list[str]:
        every = sorted(p.name for p in self.root.iterdir())
        return [n for n in every if pattern is None or fnmatch.fnmatchcase(n, pattern)]

    def download(self, name: str, into: Path) -> None:
        folder = self.root / name
        if not folder.is_dir():
            raise WorkflowError(f"download-artifact: no artifact named {name!r}")
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                target = into / path.relative_to(folder)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                target.chmod(0o644)


class PackageRegistry:
    """GitLab's generic package registry on 127.0.0.1: PUT
    /api/v4/projects/ID/packages/generic/NAME/VERSION/FILE with the running job's token
    (JOB-TOKEN) stores the file; anything else is refused and remembered."""

    PATH = re.compile(r"/api/v4/projects/(\d+)/packages/generic/([\w.-]+)/([\w.+-]+)/([\w.+-]+)")

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tokens: set[str] = set()  # the tokens of the jobs now running
        self.refused: list[str] = []
        root.mkdir(parents=True, exist_ok=True)

    def files(self, project: str, name: str, version: str) -> Path:
        return self.root / project / name / version

    @contextmanager
    def serving(self) -> Iterator[str]:
        """The registry's API URL (CI_API_V4_URL) while the server runs."""
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                found = registry.PATH.fullmatch(self.path)
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                token = self.headers.get("JOB-TOKEN")
                if found is None or token is None or token not in registry.tokens:
                    registry.refused.append(f"PUT {self.path} (token {token!r})")
                    self.send_response(401 if found else 404)
                    self.end_headers()
                    self.wfile.write(b'{"message":"refused"}')
                    return
                project, name, version, file = found.groups()
                target = registry.files(project, name, version) / file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(body)
                self.send_response(201)
                self.end_headers()
                self.wfile.write(b'{"message":"201 Created"}')

            def do_GET(self) -> None:
                registry.refused.append(f"GET {self.path}")
                self.send_response(405)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/api/v4"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
