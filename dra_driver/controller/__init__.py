"""The reservation controller: every allocated claim of this driver shows its exact placement.

See :mod:`dra_driver.controller.controller` for what it watches and writes, and ``docs/claim-status.md``
for the schema it shares with the node plugin.
"""
