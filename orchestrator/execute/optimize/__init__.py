"""What makes the faster variants: the cargo builds (baseline to optimized), PGO (training
here or elsewhere), BOLT for every binary, and what build.json records of them."""
