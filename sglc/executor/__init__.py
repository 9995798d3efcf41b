"""Program execution: the graph executor (compiled graphs), the eager interpreter (prog.run),
batches with ordered JSONL results, and the backends (embedded engine, gRPC srt). See docs/executor.md."""
