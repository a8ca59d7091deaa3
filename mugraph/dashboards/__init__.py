"""Progress display, the live search page and the end-of-run report."""
