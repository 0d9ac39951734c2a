"""Property-based fuzzing of what strangers hand us: lockfiles, archives, JSON records.

`make fuzz` runs these with FUZZ_EXAMPLES examples per target (default 400; CI keeps it
bounded so the run takes about a minute on two cores). A failure prints the smallest input
hypothesis found; rerun with the printed `@reproduce_failure` or seed to replay it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "400")),
    deadline=None,  # a shared 2-core machine: never fail on time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("fuzz")
