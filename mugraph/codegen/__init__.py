"""Stage 7, codegen: a chosen μGraph as runnable code (Triton kernels and array calls), checked in
Triton's interpreter on the CPU against the float64 reference."""

from mugraph.codegen.check import FP16_TOLERANCE, CheckReport, check_source
from mugraph.codegen.emit_module import EmitInfo, emit_module
from mugraph.codegen.errors import CodegenError

__all__ = ["FP16_TOLERANCE", "CheckReport", "CodegenError", "EmitInfo", "check_source", "emit_module"]
