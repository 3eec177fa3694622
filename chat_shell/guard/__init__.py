"""UnifiedContextGuard: the pre-model hook that keeps every model request within budget."""
