"""Conversations and their user-visible record: ownership, listing, renaming, deleting and
forking (`conversations`), the fork ancestry (`lineage`), the message tree and its versions
(`branches`), the messages of the current path as the page reads them (`messages`), and the
transcript as a JSON or Markdown download (`exports`)."""
