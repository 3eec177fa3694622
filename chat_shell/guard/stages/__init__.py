"""The guard's stages (SPEC 5.2): source stages (tool outputs, attachment previews), summary
compaction, the emergency trim and tail drop, and the refusal."""
