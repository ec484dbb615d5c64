"""The store: a loaded set of session files as columnar entries and documented DataFrames.

``corpus`` (``sk.load``, ``Corpus``), ``frames`` (entries and frames), ``index`` and ``cachedir``
(the persistent index and where it lives), ``counting`` (token counts per release),
``fields`` (reading message fields) and ``forked`` (worker processes).
"""
