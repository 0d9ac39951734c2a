"""The `gh` on a runner's PATH: records into a folder what GitHub Releases would get.

    fake_gh.py STATE REPOSITORY TAG,TAG,... release view|create|upload ...

Only the calls the generated workflow makes are known (anything else exits 2): `release
view TAG`, `release create TAG --verify-tag --title T --notes N` and `release upload TAG
FILE... --clobber`. GH_TOKEN must be set and GH_REPO must be the repository, as with gh
in a workflow; --verify-tag needs a tag that was pushed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def fail(message: str, code: int = 1) -> int:
    sys.stderr.write(f"gh (stand-in): {message}\n")
    return code


def _create(release: Path, tag: str, more: list[str], tags: list[str], repository: str) -> int:
    pairs = more[1:]
    options = dict(zip(pairs[::2], pairs[1::2], strict=True)) if len(pairs) % 2 == 0 else {}
    if more[:1] != ["--verify-tag"] or set(options) != {"--title", "--notes"}:
        return fail(f"unknown options: gh release create {tag} {' '.join(more)}", 2)
    if (release / "release.json").exists():
        return fail(f"a release for {tag} exists")
    if tag not in tags:
        return fail(f"--verify-tag: no tag {tag} in {repository}")
    (release / "assets").mkdir(parents=True)
    (release / "release.json").write_text(json.dumps(options, indent=1) + "\n")
    return 0


def _upload(release: Path, tag: str, more: list[str]) -> int:
    clobber = "--clobber" in more
    files = [word for word in more if word != "--clobber"]
    if any(word.startswith("-") for word in files) or not files:
        return fail(f"unknown options: gh release upload {tag} {' '.join(more)}", 2)
    for name in files:
        source = Path(name)
        target = release / "assets" / source.name
        if target.exists() and not clobber:
            return fail(f"asset {source.name} exists (no --clobber)")
        shutil.copyfile(source, target)
        print(f"uploaded {source.name}")
    return 0


def main(argv: list[str]) -> int:  # noqa: PLR0911 - each refusal returns gh's status
    state, repository, pushed, *args = argv
    if not os.environ.get("GH_TOKEN"):
        return fail("no GH_TOKEN: gh would not be logged in", 4)
    if os.environ.get("GH_REPO") != repository:
        return fail(f"GH_REPO is {os.environ.get('GH_REPO')!r}, not {repository!r}")
    if len(args) < 3 or args[0] != "release":
        return fail(f"unknown command: gh {' '.join(args)}", 2)
    command, tag, *more = args[1:]
    release = Path(state) / tag
    if command == "create":
        return _create(release, tag, more, pushed.split(","), repository)
    if command not in ("view", "upload") or (command == "view" and more):
        return fail(f"unknown command: gh release {' '.join(args[1:])}", 2)
    if not (release / "release.json").is_file():
        return fail("release not found")
    if command == "view":
        sys.stdout.write((release / "release.json").read_text())
        return 0
    return _upload(release, tag, more)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
