"""mugraph: a multi-level tensor-program superoptimizer built as a staged Dask pipeline."""

__version__ = "0.1.0"
