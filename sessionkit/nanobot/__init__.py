"""nanobot's own behaviour, exactly: file names, session files, Session, history policies, tokens.

Everything here must equal a nanobot release value for value and byte for byte, and each
module is checked against nanobot's code by the tests under ``tests/nanobot/``.  Nothing here
imports pandas, matplotlib, ipywidgets or tqdm.
"""
