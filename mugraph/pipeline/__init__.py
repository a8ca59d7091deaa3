"""The Dask driver, task functions, cluster set-up and resume logic (issue 5).

The only package that knows Dask."""
