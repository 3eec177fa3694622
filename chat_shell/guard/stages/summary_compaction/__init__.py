"""Summary compaction (SPEC 5.3): the guard's request stage and everything it uses."""
