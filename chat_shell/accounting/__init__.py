"""Token accounting (SPEC 4): counting and cutting text, the budget of a model profile,
calibration against the provider's counts, and the accountant of one guard."""
