"""Compaction work the backend schedules itself, outside any turn (issue 20)."""
