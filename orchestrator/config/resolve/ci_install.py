"""ci.install: where the CI runners get orchestrator, as the pip requirement that the files
`orchestrator ci` writes install. Three forms, each pinned to exact bytes or an exact
version, so a runner cannot be handed another orchestrator than the one the file names:

- "pypi": this version from PyPI (rust-release-orchestrator==<version>);
- a wheel URL with its sha256: "https://host/rust_release_orchestrator-0.1.0-py3-none-any.whl
  #sha256=<64 hex>" (file:// for a wheel on the runner's own disk); pip refuses other bytes;
- a git URL at a commit: "git+https://host/repo@<40 hex>" (a branch or tag can move).

The result goes into YAML and a double-quoted shell word, so only URL characters that are
neither quotes, spaces, `$` nor backquotes are accepted.
"""

from __future__ import annotations

import re

from orchestrator import __version__
from orchestrator.config.resources import DISTRIBUTION
from orchestrator.errors import ConfigError

PYPI = "pypi"
_URL_CHARS = r"[A-Za-z0-9._~:/%+=@-]"
_WHEEL = re.compile(
    rf"(?:https|file)://{_URL_CHARS}*/rust_release_orchestrator-[A-Za-z0-9._+-]+\.whl"
    r"#sha256=[0-9a-f]{64}"
)
_GIT = re.compile(rf"git\+(?:https|ssh|file)://{_URL_CHARS}+@[0-9a-f]{{40}}")
FORMS_HINT = (
    'ci.install is "pypi" (this version from PyPI), a wheel URL with its sha256 '
    '("https://example.com/rust_release_orchestrator-0.1.0-py3-none-any.whl#sha256=<64 hex '
    'digits>", or file:///...) or a git URL at a full commit ("git+https://example.com/'
    'orchestrator.git@<40 hex digits>").'
)


def install_requirement(source: str, where: str = "ci.install") -> str:
    """The pip requirement for `source` (a ci.install value); ConfigError for anything
    that is not one of the three pinned forms."""
    text = source.strip()
    if text == PYPI:
        return f"{DISTRIBUTION}=={__version__}"
    if _WHEEL.fullmatch(text) or _GIT.fullmatch(text):
        return f"{DISTRIBUTION} @ {text}"
    why = "is not one of its three forms"
    if text.startswith(("http://", "git+http://")):
        why = "is a plain http URL: its bytes could be changed on the way (use https)"
    elif ".whl" in text:
        why = (
            "is not a wheel URL this can pin: https:// or file://, a "
            "rust_release_orchestrator-*.whl file, no quotes, spaces or $, and "
            "#sha256=<64 lower-case hex digits> at its end"
        )
    elif text.startswith("git+"):
        why = (
            "is not a git URL this can pin: git+https://, git+ssh:// or git+file://, no "
            "quotes, spaces or $, and @<40 hex digits> (a full commit) at its end"
        )
    raise ConfigError(f"{where} {source!r} {why}", hint=FORMS_HINT)
