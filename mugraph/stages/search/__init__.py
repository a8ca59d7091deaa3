"""The μGraph search: candidate generators, canonical order, budgeted exploration."""
