"""Runtime glue: argument classification and packing, and per-backend launchers."""
