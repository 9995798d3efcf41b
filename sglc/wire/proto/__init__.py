"""Generated protobuf/gRPC modules (do not edit): regenerate with `python scripts/gen_proto.py`.

Sources live in proto/*.proto. tests/test_proto_generated.py fails if these files drift from them.
Only sglc/ir/serialize.py (and, later, the runtime client/server) should import from here.
"""
