"""Pure pipeline stages: fragments, search, prune, verify, layout, combine. None imports the pipeline."""
