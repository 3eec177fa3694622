"""Attachments: the multipart upload streamed to disk (`uploads`), the lifecycle of a stored file
from upload to deletion (`attachments`), text extraction in a sandboxed process pool
(`extraction/`), and the reader through which the runtime reads a conversation's files
(`reader`)."""
