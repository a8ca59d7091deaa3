"""Array-backend choice: CuPy where a GPU is usable, NumPy elsewhere."""

from mugraph.arrays.backend import ArrayModule, backend_name, cupy_available, get_array_module

__all__ = ["ArrayModule", "backend_name", "cupy_available", "get_array_module"]
