"""The Dask driver, task functions, cluster set-up and resume logic.

The only package that knows Dask."""
