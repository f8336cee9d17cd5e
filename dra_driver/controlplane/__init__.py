"""migdra's local control plane: what a cluster would provide, for development, tests and the demo.

Nothing here is imported by production code paths; the CLI's ``migdra sim`` commands and the tests
are its only users.
"""
