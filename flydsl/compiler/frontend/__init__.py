"""The kernel front end: traces a kernel's Python AST into a gpu.container_module."""
