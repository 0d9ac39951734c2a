"""`orchestrator ci github|gitlab`: the CI file that builds a release across runners."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.app import ConfigOption, app, console, resolve_options


class Provider(StrEnum):
    github = "github"
    gitlab = "gitlab"


@app.command()
def ci(
    provider: Annotated[
        Provider,
        typer.Argument(
            help="github: .github/workflows/release.yml; gitlab: .gitlab-ci.yml.",
            metavar="PROVIDER",
            case_sensitive=False,
        ),
    ],
    config: ConfigOption = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to write it (default: .github/workflows/release.yml or .gitlab-ci.yml "
            "at the root of the git repository holding the config).",
            metavar="PATH",
            dir_okay=False,
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing file that differs.")
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Write nothing; fail (exit 67) when the file differs from what would be "
            "written, as `render --check` does for Dockerfiles.",
        ),
    ] = False,
    install: Annotated[
        str | None,
        typer.Option(
            "--install",
            help="Where the runners get orchestrator, instead of ci.install: pypi (this "
            "version), a wheel URL with its sha256 (https://.../rust_release_orchestrator-"
            "0.1.0-py3-none-any.whl#sha256=HEX, or file://) or a git URL at a commit "
            "(git+https://...@SHA).",
            metavar="SOURCE",
        ),
    ] = None,
    public_key: Annotated[
        Path | None,
        typer.Option(
            "--public-key",
            help="The minisign public key, committed in the repository, that the generated "
            "`verify` step checks the signed release with (default: the release's own "
            "minisign.pub, which proves integrity only).",
            metavar="FILE",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Write the CI file that builds the release on CI runners and signs it once.

    On a version tag (v1.2.3), a plan job lists the targets (`release --dry-run --json`),
    one job per target runs `build --target` (GitHub: on the runner labels ci.runners
    names for its flavor, else ubuntu-latest), and one assemble job, the only one that
    reads the signing key, runs `release assemble` and `verify` and uploads the archives,
    install.sh, SHA256SUMS, signatures, provenance and release.lock (GitHub: to the GitHub
    Release; GitLab: to the generic package registry). The key comes from the secret (or
    File variable) MINISIGN_SECRET_KEY, its passphrase from MINISIGN_PASSPHRASE; the build
    jobs seal their cached profiles with ORCHESTRATOR_CACHE_KEY. With ci.verify, a second
    builder builds every target (rebuild) or one (rebuild-one) again and assemble signs
    only folders that agree byte for byte.

    \b
    Examples:
      orchestrator ci github
      orchestrator ci github --check      # in CI: is the workflow current?
      orchestrator ci gitlab --public-key minisign.pub
    """
    from orchestrator.release.targets.target import targets
    from orchestrator.supply.github_workflow import render_github
    from orchestrator.supply.gitlab_ci import render_gitlab
    from orchestrator.supply.workflows import (
        CiSettings,
        ci_spec,
        default_output,
        repository_root,
        write_workflow,
    )

    options = resolve_options(config)
    root = repository_root(options.config_path.parent)
    levels: dict[str, list[str]] = {}
    for target in targets(options, list(options.flavors)):
        levels.setdefault(target.flavor, []).append(target.level)
    spec = ci_spec(
        CiSettings.from_options(options), levels, root=root, install=install, public_key=public_key
    )
    path = output if output is not None else default_output(provider.value, root)
    state = write_workflow(
        path,
        (render_github if provider.value == "github" else render_gitlab)(spec),
        force=force,
        check=check,
    )
    console.print(f"{path}: {state}")
