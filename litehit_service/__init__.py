"""LiteHit service: gRPC online optimizer, offline replay and command-line tools.

Depends on :mod:`litehit_core`; the core never imports from here.
"""
