"""The run store: one search's record of truth, a Zarr v3 directory that only the driver writes."""
