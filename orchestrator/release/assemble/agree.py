"""The two-builder rule: a target is signed only when two independent builds of it shipped
the same bytes.

`release assemble --agree one|all` receives two folders for a target (from two runners,
or from `release --rebuild-on` on two engines with separate caches), each checked on its
own first (intact, built from this checkout's plan, every binary re-checked), then
compares what ships: every binary of build.json and every generated file. Logs, timings
and the name of the engine are allowed to differ; nothing that goes into the archive is.
One folder of each agreeing pair is published; the other was its witness.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, get_args

from orchestrator.release.assemble.carried_dispatcher import CARRIED_FILE
from orchestrator.release.assemble.shard import AssembleError, CheckedFolder
from orchestrator.supply.agreement import BuildersDisagreeError, first_difference
from orchestrator.supply.archives import GENERATED_DIR

AgreePolicy = Literal["none", "one", "all"]
AGREE_POLICIES: tuple[str, ...] = get_args(AgreePolicy)


def shipped_files(item: CheckedFolder) -> set[str]:
    """What of the folder ships: the binaries and generated files (its archive), and the
    dispatcher it carries (the -auto folder's)."""
    names = {binary.file for binary in item.manifest.artifact.binaries}
    names.update(name for name in item.record.files if name.startswith(f"{GENERATED_DIR}/"))
    names.update(name for name in item.record.files if name == CARRIED_FILE)  # -auto's bin/
    return names


def settle(
    checked: Sequence[CheckedFolder],
    policy: AgreePolicy,
    announce: Callable[[str], None],
) -> list[CheckedFolder]:
    """One folder per target, in the order first given, once every target that came twice
    agreed with itself; AssembleError when the policy asks for more pairs than came, or a
    target came three times; BuildersDisagreeError at the first pair that differs."""
    groups: dict[str, list[CheckedFolder]] = {}
    for item in checked:
        groups.setdefault(item.record.artifact, []).append(item)
    for artifact, items in groups.items():
        if len(items) > 2:
            raise AssembleError(
                f"{artifact} comes {len(items)} times: "
                + ", ".join(str(item.path) for item in items)
                + " (two builders at most)"
            )
        if len(items) == 2 and policy == "none":
            raise AssembleError(
                f"{artifact} comes twice: {items[0].path} and {items[1].path}",
                hint="Pass --agree one (or all) to compare two builds of a target before "
                "signing, or pass one folder per target.",
            )
        if len(items) == 2:
            _compare(artifact, items[0], items[1], announce)
    pairs = sum(1 for items in groups.values() if len(items) == 2)
    if policy == "all" and pairs < len(groups):
        alone = [artifact for artifact, items in groups.items() if len(items) == 1]
        raise AssembleError(
            f"--agree all: {len(alone)} target(s) were built only once: {', '.join(alone)}",
            hint="Pass two folders of every target, each from another builder.",
        )
    if policy == "one" and pairs == 0 and groups:
        raise AssembleError(
            "--agree one: no target was built twice",
            hint="Pass two folders of at least one target, each from another builder.",
        )
    return [items[0] for items in groups.values()]


def _compare(
    artifact: str, first: CheckedFolder, second: CheckedFolder, announce: Callable[[str], None]
) -> None:
    names = shipped_files(first) | shipped_files(second)
    difference = first_difference(first.path, second.path, names)
    if difference is not None:
        raise BuildersDisagreeError(
            f"{artifact}: the two builds differ, so neither is signed: "
            f"{difference.describe()} ({first.path} against {second.path})"
        )
    engines = " and ".join(
        item.record.summary.engine or "an engine it did not name" for item in (first, second)
    )
    announce(
        f"agreed: {artifact}: {len(names)} shipped file(s) byte-identical (built on {engines})"
    )
