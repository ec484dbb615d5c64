"""Experiments (``sessionkit.experiment``): each selected call's exact request sent again to an
OpenAI-compatible endpoint, under a budget, its answer compared with what the session did."""
