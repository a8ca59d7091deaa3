"""Layout selection and ranking of confirmed μGraphs.

facts.py     what a μGraph's layouts depend on (shapes, copies, matmul operands, user strides)
costs.py     a layout assignment, Mirage's cost terms, and the hard rules
choose.py    z3.Optimize over one-hot layout choices
profiles.py  A100 / H100 / H200 numbers for the roofline
roofline.py  per-kernel time: launch + max(DRAM, L2, shared memory, compute), every term kept
cost_model.py the CostModel interface the ranking takes (the time of a graph, and its breakdown)
emitted.py   today's CostModel: the kernels codegen emits, priced on a profile ("emitted-v2")
rank.py      rankings of a fragment's μGraphs (and re-ranking stored rows for another profile)
describe.py  layouts and rows as text
measure.py   fp16 timing of a μGraph as array operations (CuPy on a GPU)
"""
