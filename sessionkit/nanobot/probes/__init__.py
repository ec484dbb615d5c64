"""Scripts run inside an installed nanobot release (its own interpreter) to ask it for its prompt, tools and texts."""
