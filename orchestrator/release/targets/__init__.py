"""A release's targets and how they get built: one target (what it is, building it on one
engine, how it went), the engines' share of them (jobs, scheduling, building side by side,
making the next target's images ahead), the action cache that skips a target built from
the same inputs, the crate snapshot they all build from, and release.json and
logs/targets.json, what the release says of them."""
