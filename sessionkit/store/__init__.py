"""The store: a loaded set of session files as columnar entries and documented DataFrames.

``corpus`` (``Corpus``), ``sources`` (what a load may be given), ``loading`` (``sk.load``),
``runs`` (files read in runs, here or by workers), ``frames`` (entries and frames), ``index`` and
``cachedir`` (the persistent index and where it lives), ``counting`` (token counts per release),
``fields`` (reading message fields) and ``forked`` (worker processes).
"""
