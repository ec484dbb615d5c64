"""What the tests share: references (nanobot-ai, each release in its own environment, a stub
model server), generators and sampling; imported as ``support.<module>``.

Some modules here also run inside a release's own interpreter, as scripts
(``release_harness.py``, ``gateway_035.py``, ``request_driver_022.py``, and the scenario
modules the harness imports by name): those import nothing from this package.
"""
