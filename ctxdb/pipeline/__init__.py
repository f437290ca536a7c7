"""The decision pipeline, one module per stage of spec §5 (DESIGN.md "One decision, end to end")."""
