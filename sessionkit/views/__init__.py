"""The views that are not plots: the explorer widget, its transcript, and the HTML report.

The figures live in the public ``sessionkit.plot``.
"""
