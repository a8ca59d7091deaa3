"""The Zarr run store and the verdict memo backends (issues 3, 5).

The only package that knows Zarr and Redis."""
