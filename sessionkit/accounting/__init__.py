"""Usage and cost: what providers reported and charged, per session, turn and step, and what
another history setting would have cost (pandas; above the core in sessionkit/nanobot/)."""
