"""`orchestrator bench`: the optimization levels of one build, side by side, in one run.

The variants a build kept (plain `cargo build --release`, release profile, +PGO,
+PGO+BOLT) run interleaved (A B C D A B C D ...) after a warm-up, in one container of
the build's own image, pinned to one CPU. Ratios come from the same run, never from
numbers taken at different times.
"""

from __future__ import annotations

import io
import math
import random
import statistics
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.config.resolve.options import Options
from orchestrator.errors import BenchError, StepFailedError
from orchestrator.flavors import FlavorView, get_flavor
from orchestrator.host.inputs import pack_inputs
from orchestrator.host.source import CrateView, crate_snapshot
from orchestrator.model.documents.cache_records import VariantsRecord
from orchestrator.model.documents.records import BuildManifest, read_record
from orchestrator.model.layout import BUILDER_UID, PATHS, artifact_dir_name, release_dir_name
from orchestrator.plan.runs import run_plan
from orchestrator.runtime.engine import Container, ContainerSpec, Engine

ORDER = ("baseline", "release", "pgo", "bolt", "pgo-bolt", "release-c-off", "pgo-c-off")
LABELS = {
    "baseline": "cargo build --release",
    "release": "release profile (fat LTO, cgu=1, target-cpu)",
    "pgo": "+ PGO",
    "bolt": "+ BOLT",
    "pgo-bolt": "+ PGO + BOLT",
    "release-c-off": "release profile, [c_code] mode off",
    "pgo-c-off": "+ PGO, [c_code] mode off",
}
BENCH_DIR = "/build/bench"
# Wall time from inside the container (no API latency); max RSS, user and system CPU
# seconds from GNU time. One line: exit code, nanoseconds, kB, user s, system s.
TIMER = (
    's=$(date +%s%N); /usr/bin/time -f "%M %U %S" -o /tmp/rss "$@" >/dev/null 2>/tmp/err; '
    'c=$?; e=$(date +%s%N); echo "$c $((e - s)) $(cat /tmp/rss)"'
)
NO_DIFFERENCE = "no measurable difference"
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class Sample:
    """One timed run of one variant."""

    seconds: float
    max_rss_kb: int
    user_s: float
    system_s: float
    exit_code: int


@dataclass(frozen=True)
class VariantStats:
    name: str
    times: tuple[float, ...]  # seconds
    max_rss_kb: int
    size: int
    median: float
    p95: float
    mean: float
    stddev: float
    speedup: float  # baseline median / this median
    speedup_ci: tuple[float, float]
    user_s: float = 0.0  # mean CPU seconds per run, as GNU time counts them
    system_s: float = 0.0
    rss_kb: tuple[int, ...] = ()  # per run
    exit_codes: tuple[int, ...] = ()  # per run

    @property
    def verdict(self) -> str:
        """What the interval supports: faster, slower, or no measurable difference (the
        95% interval holds 1.0, where a ratio would only be noise)."""
        if self.name == "baseline":
            return "baseline"
        low, high = self.speedup_ci
        if low <= 1.0 <= high:
            return NO_DIFFERENCE
        return "faster" if low > 1.0 else "slower"

    def speedup_text(self) -> str:
        """The ratio with its interval, or the verdict where the interval holds 1.0."""
        interval = f"{self.speedup_ci[0]:.3f}-{self.speedup_ci[1]:.3f}"
        if self.verdict == NO_DIFFERENCE:
            return f"{NO_DIFFERENCE} ({interval})"
        return f"{self.speedup:.3f}x ({interval})"

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "label": LABELS.get(self.name, self.name),
            "runs": len(self.times),
            "median_s": self.median,
            "p95_s": self.p95,
            "mean_s": self.mean,
            "stddev_s": self.stddev,
            "speedup_vs_baseline": round(self.speedup, 4),
            "speedup_ci95": [round(self.speedup_ci[0], 4), round(self.speedup_ci[1], 4)],
            "verdict": self.verdict,
            "user_s": round(self.user_s, 4),
            "system_s": round(self.system_s, 4),
            "max_rss_kb": self.max_rss_kb,
            "size_bytes": self.size,
            "times_s": list(self.times),
        }


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear-interpolated percentile (fraction in [0, 1])."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = fraction * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def speedup_interval(
    baseline: Sequence[float], variant: Sequence[float], *, seed: int = 0
) -> tuple[float, float]:
    """95% bootstrap interval of median(baseline) / median(variant); seeded, so repeatable."""
    rng = random.Random(seed)  # noqa: S311 - statistics, not secrets
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        a = statistics.median(rng.choices(baseline, k=len(baseline)))
        b = statistics.median(rng.choices(variant, k=len(variant)))
        ratios.append(a / b)
    return percentile(ratios, 0.025), percentile(ratios, 0.975)


def summarise(samples: Mapping[str, Sequence[Sample]], sizes: dict[str, int]) -> list[VariantStats]:
    baseline = [sample.seconds for sample in samples["baseline"]]
    stats = []
    for name, runs in samples.items():
        values = [sample.seconds for sample in runs]
        median = statistics.median(values)
        stats.append(
            VariantStats(
                name=name,
                times=tuple(values),
                max_rss_kb=max(sample.max_rss_kb for sample in runs),
                size=sizes[name],
                median=median,
                p95=percentile(values, 0.95),
                mean=statistics.fmean(values),
                stddev=statistics.stdev(values) if len(values) > 1 else 0.0,
                speedup=statistics.median(baseline) / median,
                speedup_ci=speedup_interval(baseline, values),
                user_s=statistics.fmean(sample.user_s for sample in runs),
                system_s=statistics.fmean(sample.system_s for sample in runs),
                rss_kb=tuple(sample.max_rss_kb for sample in runs),
                exit_codes=tuple(sample.exit_code for sample in runs),
            )
        )
    return stats


@dataclass(frozen=True)
class BenchSetup:
    artifact: Path
    variants_dir: Path
    image: str
    sizes: dict[str, int]
    output_dir: Path
    # The crate's files at /build/src (the bench command runs there), the [train] inputs
    # (their archives unpack at /build) and [train] env.
    sources: bytes = b""
    inputs: tuple[bytes, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)


def bench_cpu(engine: Engine) -> str:
    """The CPU benchmarks are pinned to: the last one, away from the Engine's own work."""
    return str(max(int(engine.info().get("NCPU", 1)) - 1, 0))


def locate(options: Options, flavor_name: str) -> BenchSetup:
    """Find the published build of `flavor_name` (at options.target_cpu) and its variants."""
    flavor = get_flavor(flavor_name)
    if flavor.runner:
        raise BenchError(
            f"the {flavor_name} binaries run under {flavor.runner[0]} on this machine: "
            "timing an emulator says nothing about the binary",
            hint=f"Run the bench on a {flavor.arch} machine, or bench an x86_64 flavor.",
        )
    release = options.artifacts_dir / release_dir_name(options.binary, options.version)
    artifact = release / (
        artifact_dir_name(options.binary, options.version, flavor.arch, flavor.artifact_flavor)
        + flavor.artifact_suffix(FlavorView.from_options(options))
    )
    cache_dir = options.cache_dir
    manifest_path = artifact / "build.json"
    if not manifest_path.is_file():
        raise BenchError(
            f"no published {flavor_name} build at {artifact}",
            hint=f"Build it first: orchestrator build --flavor {flavor_name}",
        )
    manifest = read_record(manifest_path, BuildManifest)
    variants_dir = cache_dir / "variants" / manifest.artifact.sha256
    description = variants_dir / "variants.json"
    if not description.is_file():
        raise BenchError(
            f"the variant binaries of {artifact.name} are not in {cache_dir / 'variants'}",
            hint=f"Rebuild to keep them: orchestrator build --flavor {flavor_name}",
        )
    kept = read_record(description, VariantsRecord)
    sizes = {name: variant.size for name, variant in kept.variants.items()}
    return BenchSetup(
        artifact,
        variants_dir,
        kept.image,
        sizes,
        release / "bench" / artifact.name,
        sources=crate_snapshot(CrateView.from_options(options)).archive,
        inputs=tuple(item.archive for item in pack_inputs(options.train_inputs)),
        environment=run_plan(options.run_env, options.run_stdin).environment,
    )


def binaries_tar(directory: Path, names: Sequence[str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in names:
            info = tar.gettarinfo(str(directory / name), arcname=f"bench/{name}")
            info.uid = info.gid = BUILDER_UID
            info.mode = 0o755
            with (directory / name).open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()


def _timed(
    box: Container, binary: str, command: Sequence[str], environment: Mapping[str, str]
) -> Sample:
    lines: list[str] = []
    code = box.exec(
        ["sh", "-c", TIMER, "sh", binary, *command],
        on_output=lines.append,
        environment=environment,
        workdir=PATHS.src,
    )
    fields = lines[-1].split() if lines else []
    if code != 0 or len(fields) != 5 or fields[0] != "0":
        raise StepFailedError(f"benchmark run of {binary} failed: {' '.join(lines)[-300:]}")
    try:
        return Sample(
            int(fields[1]) / 1e9, int(fields[2]), float(fields[3]), float(fields[4]), int(fields[0])
        )
    except ValueError:
        raise StepFailedError(
            f"benchmark run of {binary}: unreadable timing {lines[-1]!r}"
        ) from None


def kept_variants(setup: BenchSetup) -> list[str]:
    """The variants the build kept, least optimized first."""
    return [name for name in ORDER if name in setup.sizes]


@contextmanager
def bench_box(engine: Engine, setup: BenchSetup, cpu: str) -> Iterator[Container]:
    """A container of the build's image pinned to `cpu`, holding every kept variant at
    /build/bench/<variant>, the crate's files at /build/src and the [train] inputs."""
    if engine.image(setup.image) is None:
        raise BenchError(
            f"the build's image {setup.image} is gone", hint="Rebuild: orchestrator build"
        )
    spec = ContainerSpec(setup.image, cpuset=cpu, purpose="bench")
    with engine.container(spec) as box:
        box.put_archive("/build", binaries_tar(setup.variants_dir, kept_variants(setup)))
        for archive in (setup.sources, *setup.inputs):
            if archive:
                box.put_archive(PATHS.root, archive)
        yield box


def measure(
    engine: Engine,
    setup: BenchSetup,
    command: Sequence[str],
    *,
    runs: int,
    warmup: int,
    cpu: str,
    progress: Callable[[str], None],
) -> list[VariantStats]:
    names = kept_variants(setup)
    samples: dict[str, list[Sample]] = {n: [] for n in names}
    with bench_box(engine, setup, cpu) as box:
        for round_ in range(warmup + runs):
            timed = round_ >= warmup
            for name in names:  # interleaved: drift hits every variant alike
                sample = _timed(box, f"{BENCH_DIR}/{name}", command, setup.environment)
                if timed:
                    samples[name].append(sample)
            progress(f"round {round_ + 1}/{warmup + runs}" + ("" if timed else " (warm-up)"))
    return summarise(samples, setup.sizes)
