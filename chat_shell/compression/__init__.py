"""Token accounting, budgets, calibration and summary compaction."""
