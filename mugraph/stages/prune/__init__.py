"""Abstract-expression pruning with a Z3 oracle."""
