"""The simulations: what each release replays and trims, computed from the store.

``replay`` (each session rewritten and counted once; its work in the ``replay_*`` modules),
``windowing`` (``sk.windows``), ``filecap`` (``sk.file_cap``) and ``states``
(``sk.message_states``).
"""
