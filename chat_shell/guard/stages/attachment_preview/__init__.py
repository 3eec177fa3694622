"""Attachment previews (SPEC 5.2.2): the guard's source stage and the previews it shows."""
