"""A run of `optimize`, put together once for the command line and the library: options (`options`,
checked by `checks`), the run's paths (`RunPaths`, named in storage, the lowest room that needs them),
the plan and I/O layouts (`prepare`), the store, memo and cluster around the driver (`setup`,
`execute`), the kernels written beside the store (`kernels`), what a finished store says
(`outcome`), and a run with the command line's output (`printed`). Importing it imports neither Dask
nor torch."""

from mugraph.storage.run.paths import RunPaths

__all__ = ["RunPaths"]
