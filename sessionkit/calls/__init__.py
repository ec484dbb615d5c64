"""Every LLM call nanobot made, whole (``sessionkit.request`` and ``sessionkit.requests``): the installed release's prompt and tools (asked once,
cached), assembled with the replayed history, the current message and the turn's steps."""
