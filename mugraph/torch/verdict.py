"""What an optimised module got, as a record it carries: per fragment the μGraph that replaced the
reference and its estimated speedup, or that the reference was kept and why; the heavy ops that stayed
glue (run by PyTorch as written, never searched); and where the run's store and report are. A user who
only holds the module can then tell whether anything got faster."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from torch import fx

from mugraph.ir.plural import counted, noun
from mugraph.ir.together import Together, outside_words, speedup_text, together
from mugraph.torch.capture import Captured
from mugraph.torch.load_check import GENERATED, LoadCheck
from mugraph.torch.timing import Measured

# ATen ops that carry a model's FLOPs: where they stay glue, the search never saw them.
HEAVY_OPS = frozenset(
    {"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "conv1d", "conv2d", "conv3d", "convolution", "einsum"}
)
_HEAVY_WORDS = frozenset({"matmul", "linear", "einsum", "attention", "convolution"})


def is_heavy(op: str) -> bool:
    """Whether an op runs a GEMM, a convolution or attention: the ATen ones by name, and ops of other
    libraries by their words (transformers' `grouped_mm_fallback` for MoE experts, `_scaled_mm`,
    `scaled_dot_product_attention`, `cudnn_convolution`)."""
    words = [w for w in op.lower().split("_") if w]
    return op in HEAVY_OPS or any(w.endswith("mm") or w in _HEAVY_WORDS or w.startswith("conv") for w in words)


@dataclass(frozen=True)
class FragmentVerdict:
    """One fragment's outcome: `chosen` is the μGraph's digest, or "reference" where the reference was
    kept (`reason` says why)."""

    name: str
    chosen: str
    speedup: float  # estimated, over the reference (1.0 where the reference is kept)
    kernels: int
    estimated_seconds: float
    ranked: int  # confirmed μGraphs ranked
    reason: str | None = None
    reference_estimate: float | None = None  # the reference's estimated seconds, where the run gave them

    @property
    def kept_reference(self) -> bool:
        return self.chosen == "reference"

    @property
    def reference_seconds(self) -> float | None:
        """The reference's estimated time (the speedup is its ratio to the chosen one); None for a
        μGraph of no kernel, estimated at 0 s with its speedup stored as 0."""
        if self.reference_estimate is not None:
            return self.reference_estimate
        if self.kept_reference:
            return self.estimated_seconds
        return self.estimated_seconds * self.speedup if self.speedup > 0 else None

    def line(self) -> str:
        if self.kept_reference:
            return f"{self.name}: kept the reference, because {self.reason or 'it ranks first'}"
        if not self.kernels:
            return f"{self.name}: μGraph {self.chosen[:16]}, no kernel (its outputs are its inputs)"
        kernels = counted(self.kernels, "kernel")
        return f"{self.name}: μGraph {self.chosen[:16]}, {kernels}, {estimated(self.speedup)}"


def _phrase(f: FragmentVerdict) -> str:
    """A fragment in the module's repr: "reference", "no kernel" (nothing runs: no ratio), "1.84x"."""
    return "reference" if f.kept_reference else "no kernel" if not f.kernels else f"{f.speedup:.2f}x"


def estimated(speedup: float) -> str:
    """A chosen μGraph's estimate against the reference, in words that never call a slowdown faster (a
    μGraph timed faster on a GPU is chosen though the model estimated it slower)."""
    ratio = speedup_text(speedup)  # never 1.00x for 0.996
    if speedup > 1.0:
        return f"estimated {ratio} faster"
    if speedup == 1.0:
        return "estimated as fast as the reference"
    return f"estimated slower than the reference ({ratio} its speed)"


@dataclass(frozen=True)
class Verdict:
    """The outcome of `mugraph.optimize` (or of the store `mugraph.load` read)."""

    program: str
    complete: bool  # the search covered its whole space (else it stopped at the time limit)
    reused: bool  # the store was found finished and nothing was searched
    fragments: tuple[FragmentVerdict, ...]
    heavy_glue: tuple[str, ...]  # heavy ops PyTorch runs as written: "linear (linear_1)", ...
    store: str
    report: str | None
    gpu_profile: str
    # how to go on with a stopped search, as the run says it (`how_to_resume`): "without fresh=True"
    # only where the call passed it; None where the run did not say
    resume: str | None = None
    # what differed where the module's outputs disagreed with the model's on the example inputs (the
    # module then runs the model's own program, `self_check`); None where they agreed
    self_check: str | None = None
    # the model's own outputs differed between two calls on the same inputs (a random op in its
    # forward): the disagreement says nothing of the kernels
    model_varies: bool = False
    # the module against the model, timed on the example inputs where the kernels ran compiled on a GPU
    measured: Measured | None = None
    # the inputs of the check `self_check` reports: the example inputs (`mugraph.optimize`), or inputs
    # made from their shapes and dtypes against the exported program (`mugraph.load`)
    checked_on: str = "the example inputs"
    # why the module was not checked against the model (`mugraph.optimize`: a model that writes its
    # buffers or inputs) or its exported program (`mugraph.load`); None where it was
    unchecked: str | None = None
    # every op PyTorch runs as glue, by name in graph order (`glue_ops`); None where not known
    glue: tuple[str, ...] | None = None

    def after_load(self, found: LoadCheck | None) -> Verdict:
        """This verdict with what `mugraph.load`'s check of the module found."""
        if found is None:
            return self
        if found.mismatch is not None:
            return replace(self, self_check=found.mismatch, model_varies=False, checked_on=GENERATED, measured=None)
        if found.skipped is None:
            return self
        return replace(self, unchecked=found.skipped, checked_on=GENERATED)

    @property
    def together(self) -> Together | None:
        """The fragments priced together: their references' estimated seconds summed against the chosen
        ones' (a kept reference counts on both sides); glue is in neither. None for one fragment (its
        own figure says it) or where a fragment's reference time is not known."""
        seconds = []
        for f in self.fragments:
            reference = f.reference_seconds
            if reference is None:
                return None
            seconds.append((reference, f.estimated_seconds))
        return together(seconds)

    def together_line(self) -> str | None:
        """`together` in words, naming the glue it leaves out."""
        figure = self.together
        return None if figure is None else figure.line(outside_words(self.glue, (), from_torch=True))

    @property
    def faster(self) -> bool:
        """True where some fragment runs a μGraph estimated faster than its reference, and the module,
        where it was timed, took less time a call than the model. It says nothing of how much faster
        the model is: that is `together` for the fragments, with the glue unpriced."""
        slower = self.measured is not None and self.measured.ratio < 1.0
        return (
            self.self_check is None
            and not slower
            and any(not f.kept_reference and f.speedup > 1.0 for f in self.fragments)
        )

    def summary(self) -> str:
        """One phrase per fragment, for the module's repr, then the fragments together where there are
        several: "f0 1.84x, f1 reference; together 1.31x"."""
        each = ", ".join(f"{f.name} {_phrase(f)}" for f in self.fragments)
        figure = self.together
        return each if figure is None else f"{each}; together {figure.ratio()}"

    def notes(self) -> list[str]:
        """What a reader should not miss: heavy ops never searched, and a module that runs the reference."""
        out = []
        if self.self_check is not None and self.model_varies:
            out.append(
                "the model's own outputs differ from one call to the next on the same inputs (a random op in its "
                f"forward, such as randn_like, rand or dropout?), so the optimised module could not be checked "
                f"against it ({self.self_check}): it runs the model's own program instead; the search's μGraphs "
                "are in the store, and mugraph.load runs them unchecked"
            )
        elif self.self_check is not None:
            out.append(
                f"the optimised module's outputs differed from the model's on {self.checked_on} ({self.self_check}): "
                "it runs the model's own program instead (a fault of mugraph on this machine; please report it)"
            )
        elif self.unchecked is not None:
            when = " when loaded" if self.checked_on == GENERATED else ""
            out.append(f"the module was not checked against the model{when}: {self.unchecked}")
        if self.measured is not None:
            out.append(self.measured.line())
            if self.measured.ratio < 1.0 and self.self_check is None:
                out.append(
                    "the module is slower than the model as called from Python: its kernels' launches cost more "
                    "than the estimate counts at these sizes; a CUDA graph of the module replays them without "
                    'Python (docs/torch.md, "On a GPU")'
                )
        out += glue_notes(self.heavy_glue, bool(self.fragments) and all(f.kept_reference for f in self.fragments))
        if not self.complete:
            out.append(f"the search stopped at its time limit: {self.resume or 'optimise again to resume it'}")
        return out

    def __str__(self) -> str:
        """What `print(fast.verdict)` shows: the lines `describe()` gives under "verdict:", not the record."""
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """The verdict as text: one line per fragment, the fragments together, the notes, the store and
        report."""
        unused = " (found, not run: the module runs the model's own program)" if self.self_check is not None else ""
        figure = self.together_line()
        return [
            *(f.line() + unused for f in self.fragments),
            *([figure + unused] if figure else []),
            *(f"note: {n}" for n in self.notes()),
            f"store: {self.store}",
            *([f"report: {self.report}"] if self.report else []),
        ]


def glue_notes(heavy: Sequence[str], all_kept: bool) -> list[str]:
    """What a model's verdict notes of what it leaves to PyTorch: heavy ops never searched, and a
    module that runs the model's own ops everywhere (`mugraph.optimize`'s and the command line's)."""
    out = []
    if heavy:
        out.append(
            f"{counted(len(heavy), 'heavy op')} {noun(len(heavy), 'stays', 'stay')} glue, "
            "run by PyTorch as written and not searched: " + ", ".join(heavy)
        )
    if all_kept:
        out.append(
            "every fragment kept the reference: the module runs the model's own ops (as Triton kernels and "
            "torch calls), estimated no faster than the model"
        )
    return out


def heavy_glue(captured: Captured) -> tuple[str, ...]:
    """The heavy ops of a capture that stayed glue, as "op (node)" in graph order."""
    nodes = {n.name: n for n in captured.exported.graph.nodes}
    out = []
    for name in captured.lowering.glue:
        node = nodes.get(name)
        op = _op_name(node) if node is not None else ""
        if is_heavy(op):
            out.append(f"{op} ({name})")
    return tuple(out)


def glue_ops(captured: Captured) -> tuple[str, ...]:
    """Every op of a capture that stayed glue (run by PyTorch, priced by no fragment), by op name in
    graph order: "permute", "softmax"."""
    nodes = {n.name: n for n in captured.exported.graph.nodes}
    return tuple(_op_name(nodes[name]) if name in nodes else name for name in captured.lowering.glue)


def _op_name(node: fx.Node) -> str:
    """`aten.linear.default` -> "linear"."""
    packet = getattr(node.target, "_opname", None) or getattr(node.target, "__name__", "")
    return str(packet).split(".")[0]
