"""The decision pipeline, one module per stage of spec §5 (docs/pipeline.md, docs/design.md)."""
