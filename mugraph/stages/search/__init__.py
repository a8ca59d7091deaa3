"""The μGraph search: candidate generators, canonical order, budgeted exploration (issue 4)."""
