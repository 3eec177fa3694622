"""Operators' telemetry of a turn: spans (turn, model call, tool call, compaction) and metrics.

Everything goes through the OpenTelemetry API: without an SDK installed (telemetry disabled)
it costs next to nothing and records nothing. The backend installs the SDK (`backend.telemetry`).
"""
