"""What decides whether and which variant ships: validation against the baseline, the
speed gate and its callgrind counts, `orchestrator bench`, portability (glibc floor,
distros) and the GPU flavors' device-code checks."""
