"""The node process: kubelet DRA gRPC, plugin registration and ResourceSlice publishing.

Only the CLI entry point imports this package; the library (``dra_driver``) never does.
"""
