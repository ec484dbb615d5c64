"""The writers: forks written back to disk (``sk.fork``) and ``doctor`` with its mend."""
