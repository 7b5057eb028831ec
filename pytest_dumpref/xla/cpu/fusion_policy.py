"""XLA's CPU loop-fusion pass (``fusion``), restated as a model that predicts its decisions.

Given the module the pass saw (the dump snapshot just before ``fusion``), ``predict`` replays
the pass on it: the same queue, the same operand order, the same checks in the same order,
the same reason strings, and it changes the module as the pass would (a fusion instruction
grows, a producer with no users left disappears), so the decisions come out in the order
the compiler logs them.  Every rule below names the XLA function it restates; they were
read in openxla/xla (via the ROCm/xla mirror, main of August 2026):

  xla/service/instruction_fusion.cc
      InstructionFusion::Run                 the queue and the loop over operands (``_run``)
      ReversePostOrderFusionQueue            reverse post order; operands by queue position
      InstructionFusion::ComputeGloballyUnfusible, EffectivelyAtMostUnary, CanFuseOnAllPaths
                                             "operand can not be duplicated"
      InstructionFusion::ShouldFuse          root, FusionWouldDuplicate, IsAlwaysDuplicable
      InstructionFusion::ReusedOperandsOf, UpdateReusedOperandsForFusion
                                             which operands a (growing) fusion reuses
      IsConsumerSuitableForMultiOutputFusion (default)  "multi-output fusion not supported
                                             by this pass": the CPU pass builds no
                                             multi-output or sibling fusions, so every
                                             refusal ends with that second reason
      InstructionFusion::DumpNotFusingState  refusals about get-tuple-element are not logged
  xla/service/cpu/cpu_instruction_fusion.cc
      CpuInstructionFusion::ShouldFuse       the CPU checks, in order (``_should_fuse``)
      CpuInstructionFusion::IsExpensive      ``is_expensive``
      CanBeLoopFused, CanBeOutputFused, CanBeOutputFusedIntoSomeOperand
      CpuInstructionFusion::ComputeInstructionsToSkip / ShouldSkip
                                             custom (library) fusions are never consumers:
                                             the hand-offs of the library rewriter
      CpuInstructionFusion::ComputeGloballyUnfusible
                                             the stable-softmax producer (max and exp shift)
                                             is never duplicated: added to XLA in July 2026
                                             (PR #44738), after the XLA of jaxlib 0.10.2, which
                                             duplicates it (softmax(x * 0.125) with the library
                                             rewriter off shows it); on when the jaxlib
                                             installed has it (0.12 on), or as
                                             ``coupled_softmax_rule=`` says
  xla/service/fusion_node_indexing_evaluation.cc  "Code duplication too high"
  xla/hlo/ir/hlo_instruction.cc           IsOpElementwise, IsFusible, OperandElementUse
  xla/service/decision.h                  Decision::Or joins two reasons with " ; "

What is not restated (a decision that needs it is mispredicted, and ``compare`` says so):
in-place consumers (dynamic-update-slice, scatter: ShouldFuseInPlaceOp), control
dependencies, compiler fuel, and the multi-output fusion pass that runs only when
``xla_cpu_use_multi_output_fusion`` is set (off by default).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo import HloComputation, HloModule, Instruction, Shape, parse_module
from ..traffic import module_traffic

MOF_REASON = "multi-output fusion not supported by this pass"
NOT_DUPLICABLE = "operand can not be duplicated"

# IsOpElementwise (hlo_instruction.cc); constants count as elementwise too
# (HloConstantInstruction::IsElementwiseImpl).
ELEMENTWISE = frozenset("""
abs acos acosh asin asinh atanh round-nearest-afz round-nearest-even ceil count-leading-zeros
convert bitcast-convert copy cosine cosh erf exponential exponential-minus-one floor imag
is-finite log log-plus-one not negate popcnt real reduce-precision rsqrt logistic sign sine
sinh sqrt cbrt tan tanh add atan2 compare complex divide maximum minimum multiply mulhi
power remainder subtract and or xor shift-left shift-right-arithmetic shift-right-logical
stochastic-convert select clamp constant""".split())

# CanBeLoopFused (cpu_instruction_fusion.cc): elementwise, plus these.
LOOP_FUSIBLE = frozenset("""bitcast broadcast concatenate dynamic-slice dynamic-update-slice
gather iota pad reduce reshape reverse slice transpose""".split())

# CpuInstructionFusion::IsExpensive: opcodes that are expensive whatever their types.
EXPENSIVE = frozenset("""
acos acosh sinh asin asinh atan2 atanh cosh tanh cbrt power rsqrt sqrt erf exponential
exponential-minus-one log log-plus-one add-dependency after-all async-start async-update
async-done batch-norm-grad batch-norm-inference batch-norm-training call cholesky conditional
convolution all-gather all-gather-start all-gather-done all-reduce reduce-scatter
all-reduce-start all-reduce-done all-to-all collective-broadcast collective-permute
collective-permute-done collective-permute-start custom-call domain dot fft fusion gather
logistic map parameter ragged-all-to-all ragged-dot recv recv-done reduce reduce-window rng
rng-get-and-update-state rng-bit-generator scaled-dot scan scatter select-and-scatter send
send-done sort topk triangular-solve while get-dimension-size set-dimension-size""".split())
# ... expensive only for complex elements
EXPENSIVE_IF_COMPLEX = frozenset({"abs", "sign", "cosine", "sine", "tan"})

# IsFusible (hlo_instruction.cc): never fused, never a consumer.
NOT_FUSIBLE = frozenset({"domain", "parameter", "while", "conditional", "call"})
# HasSideEffect, for the opcodes a jax program meets.
SIDE_EFFECTS = frozenset({"send", "send-done", "recv", "recv-done", "infeed", "outfeed",
                          "rng-get-and-update-state", "after-all", "all-reduce-start"})
# Computations called with these are "embedded" (scalar bodies): the pass skips them.
EMBEDDING_OPCODES = frozenset({"reduce", "reduce-window", "map", "sort", "scatter",
                               "select-and-scatter", "all-reduce", "reduce-scatter",
                               "all-reduce-start", "custom-call", "scan", "fusion"})
# cpu::FusionWrapper::MustWrapInstruction with the fusion emitters on (the default); copies
# only when they change the layout; convolutions go to Eigen and are not wrapped.
WRAPPED = frozenset("""
scatter abs acos acosh add and asin asinh atan2 atanh bitcast-convert broadcast cbrt ceil clamp
count-leading-zeros compare complex convert cosine cosh divide dynamic-slice dynamic-update-slice
transpose erf exponential exponential-minus-one floor gather imag iota is-finite log log-plus-one
map maximum minimum mulhi multiply negate not or pad popcnt power real reduce reduce-precision
reduce-window remainder reshape reverse round-nearest-afz round-nearest-even rsqrt select
shift-left shift-right-arithmetic shift-right-logical sign sine sinh slice sqrt subtract tan
tanh xor""".split())
# FusionNodeIndexingEvaluation::kAllowedCodeDuplication; ElementalIrEmitter::OpInvalidatesCache
ALLOWED_CODE_DUPLICATION = 15
INVALIDATES_CACHE = frozenset({"concatenate", "dot", "dynamic-update-slice", "pad", "reduce",
                               "reduce-window"})
MAX_CONCATENATE_ARGUMENTS = 8       # CpuInstructionFusion::ShouldFuse, kMaxConcatenateArguments
MAX_REDUCTIONS_IN_FUSION = 5        # ... kMaxReductionsInFusion
FUSION_THRESHOLD_BYTES = 16 * 1024  # ... kFusionThresholdBytes (small matrix-vector dots)

_COMPLEX = ("c64", "c128")
_INTEGRAL = ("s2", "s4", "s8", "s16", "s32", "s64", "u2", "u4", "u8", "u16", "u32", "u64")


# The refusal rules ``predict(without=...)`` can leave out, each by the function it restates.
RULES = ("ShouldSkip", "ShouldFuse: non-scalar constant", "CanBeLoopFused",
         "IsExpensive and ReusesOperandElements", "FusionWouldDuplicate and IsExpensive",
         "ShouldFuse: lone constant", "ComputeGloballyUnfusible", "ShouldFuse: no fusible case")


class FusionModelError(ValueError):
    """A module the model cannot replay; the message names the module and instruction."""


# ---- the graph the pass mutates ------------------------------------------------------------

class Node:
    """An instruction of a computation being fused; ``fused`` is set for fusion instructions."""
    __slots__ = ("name", "opcode", "shape", "operands", "users", "inst", "kind", "fused",
                 "origin", "max_reduce")

    def __init__(self, name, opcode, shape, inst=None, kind=None):
        self.name, self.opcode, self.shape, self.inst, self.kind = name, opcode, shape, inst, kind
        self.operands: list[Node] = []
        self.users: list[Node] = []
        self.fused: FusedComputation | None = None
        self.origin = name          # for a fusion the pass made: the consumer it grew from
        self.max_reduce = False     # a reduce whose region's root is maximum (IsMaxReduction)

    def attr(self, key, default=None):
        return self.inst.attrs.get(key, default) if self.inst is not None else default

    def fused_computation(self) -> FusedComputation:
        """The computation of a fusion instruction (it has one from the moment it is made)."""
        if self.fused is None:
            raise FusionModelError(f"{self.name} ({self.opcode}) has no fused computation")
        return self.fused

    def __repr__(self):
        return f"<Node {self.name} {self.opcode}>"


class Clone:
    """An instruction inside a fused computation: operands are Clones or ``("param", i)``."""
    __slots__ = ("name", "opcode", "shape", "operands", "inst", "param_shapes")

    def __init__(self, name, opcode, shape, inst, param_shapes):
        self.name, self.opcode, self.shape, self.inst = name, opcode, shape, inst
        self.operands: list = []
        self.param_shapes = param_shapes   # its fused computation's parameter shapes (shared)


@dataclass
class FusedComputation:
    root: Clone
    clones: list = field(default_factory=list)
    params: list = field(default_factory=list)     # shapes, by parameter number

    def users_of_param(self, i):
        return [c for c in self.clones if ("param", i) in c.operands]


def _add_user(op: Node, user: Node) -> None:
    if user not in op.users:
        op.users.append(user)


def _drop_user(op: Node, user: Node) -> None:
    if user in op.users:
        op.users.remove(user)


# ---- instruction properties (hlo_instruction.cc) ----------------------------------------

def _is_elementwise(n) -> bool:
    """HloInstruction::IsElementwise; a fusion is elementwise when everything in it is."""
    if n.opcode == "fusion":
        return n.fused is not None and all(_is_elementwise(c) for c in n.fused.clones)
    if n.opcode == "bitcast-convert" and n.inst is not None:
        return False if not n.operands else _bits(n.shape) == _bits(_shape(n.operands[0], n))
    return n.opcode in ELEMENTWISE


def _bits(s: Shape) -> str:
    return "".join(ch for ch in s.element_type if ch.isdigit())


def _shape(op, owner) -> Shape:
    """The shape of an operand; ``("param", i)`` inside a fused computation."""
    return op.shape if not isinstance(op, tuple) else owner.param_shapes[op[1]]


def _is_fusible(n: Node) -> bool:
    if n.opcode in NOT_FUSIBLE:
        return False
    if n.opcode in ("fusion", "map", "reduce", "reduce-window"):
        return True
    if n.opcode == "rng":
        return len(n.users) <= 1
    if n.opcode == "custom-call" and "custom_call_has_side_effect=true" in (n.inst.line if n.inst else ""):
        return False
    return n.opcode not in SIDE_EFFECTS


def is_expensive(n) -> bool:
    """CpuInstructionFusion::IsExpensive."""
    op, et = n.opcode, n.shape.element_type if not n.shape.is_tuple else ""
    if op in EXPENSIVE:
        return True
    if op in EXPENSIVE_IF_COMPLEX:
        return et in _COMPLEX
    if op == "convert":
        src = n.operands[0].shape.element_type if n.operands else ""
        return et == "bf16" and src == "f32"
    if op in ("divide", "remainder"):
        # integer division by a constant (operand 0, as the CPU function tests) is cheap
        if et not in _INTEGRAL:
            return True
        a = n.operands[0]
        if a.opcode == "broadcast":
            a = a.operands[0]
        return not (a.opcode == "constant" and a.shape.element_count == 1)
    return False


def _can_be_loop_fused(n) -> bool:
    return _is_elementwise(n) or n.opcode in LOOP_FUSIBLE


def _is_effective_scalar(s: Shape) -> bool:
    return not s.is_tuple and s.element_count == 1


def _true_rank(s: Shape) -> int:
    return 0 if s.is_tuple else sum(1 for d in s.dims if d != 1)


def _elements(s: Shape) -> int:
    return sum(x.element_count for x in s.leaves())


def _rank(s: Shape) -> int:
    return 0 if s.is_tuple else len(s.dims)


def _minor_dim(s: Shape) -> int:
    return s.minor_to_major[0] if s.dims else 0


def _int_list(text: str | None) -> list[int]:
    return [int(x) for x in (text or "").strip("{}").split(",") if x.strip()]


# ---- OperandElementUse (hlo_instruction.cc) -------------------------------------------------

REUSE, USE, NO_USE = 0, 1, 2


def _operand_element_use(n, i: int) -> int:
    op = n.opcode
    if op in ("bitcast", "concatenate", "reshape", "reverse", "slice", "transpose", "gather"):
        return USE
    if op == "pad":
        return REUSE if i > 0 else USE
    if op == "reduce":
        return REUSE if i >= len(n.operands) // 2 else USE
    if op == "fusion":
        return _fusion_param_use(n.fused, i)
    if op == "dot":
        if _rank(n.shape) <= 1:
            other = n.operands[1 - i] if len(n.operands) == 2 else None
            if other is not None and _rank(_shape(other, n)) <= 1:
                return USE
        return REUSE
    if op == "dynamic-update-slice":
        return USE if i in (0, 1) else REUSE
    return USE if _is_elementwise(n) else REUSE


def _fusion_param_use(fused: FusedComputation, param: int) -> int:
    """FusionReusesParamElements::Compute: the meet over the paths from the fused root."""
    cache: dict[int, int] = {}

    def visit(c) -> int:
        if isinstance(c, tuple):
            return USE if c[1] == param else NO_USE
        if id(c) in cache:
            return cache[id(c)]
        cache[id(c)] = NO_USE
        value = NO_USE
        for k, o in enumerate(c.operands):
            use = _operand_element_use(c, k)
            if use == NO_USE:
                continue
            sub = visit(o)
            if sub == NO_USE:
                continue
            value = min(value, use, sub)
            cache[id(c)] = value
            if value == REUSE:
                break
        return value

    return visit(fused.root)


# ---- the pass ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    """One decision of the pass as the model makes it.  ``consumer`` is the consumer's name
    at that moment (a fusion's name once it has grown), ``consumer_origin`` the instruction
    it grew from; ``reason`` the compiler's full wording of a refusal (None: fused);
    ``rule`` the rule that decided, by the XLA function that holds it; ``logged`` whether
    XLA writes the decision to its fusion log (refusals about get-tuple-element are not)."""
    computation: str
    producer: str
    consumer: str
    consumer_origin: str
    reason: str | None
    rule: str
    logged: bool = True

    @property
    def fused(self) -> bool:
        return self.reason is None

    @property
    def verdict(self) -> str:
        return "fused" if self.reason is None else self.reason


@dataclass
class FusionResult:
    """What the pass did to one computation: the decisions and the computation after it."""
    computation: str
    decisions: list
    nodes: list                  # Nodes left in the computation, in their original order
    root: Node | None = None


class _Pass:
    """InstructionFusion::Run with CpuInstructionFusion's overrides, on one computation."""

    def __init__(self, module: HloModule, comp: HloComputation, names: set, *,
                 coupled_softmax_rule: bool = False, without: frozenset = frozenset()):
        self.without = without
        self.module, self.comp, self.names = module, comp, names
        self.coupled_softmax_rule = coupled_softmax_rule
        self.nodes: dict[str, Node] = {}
        for inst in comp.instructions:
            n = Node(inst.name, inst.opcode, inst.shape, inst, inst.fusion_kind)
            self.nodes[inst.name] = n
        for inst in comp.instructions:
            n = self.nodes[inst.name]
            for o in inst.operands:
                n.operands.append(self.nodes[o])
                _add_user(self.nodes[o], n)
            if inst.opcode == "fusion":
                n.fused = self._dumped_fusion(inst)
        self.root = self.nodes[comp.root.name]
        # ComputeInstructionsToSkip: custom fusions (the library rewriter's kernels)
        self.skip = {n for n in self.nodes.values() if n.opcode == "fusion" and n.kind == "kCustom"}
        self.reused: dict[int, set] = {}        # ReusedOperandsOf cache, by id(node)
        self.evaluations: dict[int, _IndexingEvaluation] = {}
        self.decisions: list[Prediction] = []

    # -- a fusion that was already in the module (e.g. a library rewriter's) --------------
    def _dumped_fusion(self, inst: Instruction) -> FusedComputation:
        comp = self.module.computations[inst.called[0]]
        clones: dict[str, Clone] = {}
        params = [None] * len(comp.parameters)
        for c in comp.instructions:
            if c.opcode == "parameter":
                params[c.parameter_number] = c.shape
                continue
            clones[c.name] = Clone(c.name, c.opcode, c.shape, c, params)
        pnum = {p.name: p.parameter_number for p in comp.parameters}
        for c in comp.instructions:
            if c.opcode != "parameter":
                clones[c.name].operands = [("param", pnum[o]) if o in pnum else clones[o]
                                           for o in c.operands]
        root = clones.get(comp.root.name) or Clone(comp.root.name, "parameter", comp.root.shape, comp.root, params)
        return FusedComputation(root, list(clones.values()), params)

    # -- post order (HloComputation::MakeInstructionPostOrder) ----------------------------
    def post_order(self) -> list[Node]:
        order: list[Node] = []
        state: dict[int, int] = {}
        for n in self.nodes.values():
            if n.users:
                continue
            stack = [n]
            while stack:
                cur = stack[-1]
                s = state.get(id(cur))
                if s is None:
                    state[id(cur)] = 1
                    for o in reversed(cur.operands):
                        if state.get(id(o)) != 2:
                            stack.append(o)
                else:
                    stack.pop()
                    if s != 2:
                        state[id(cur)] = 2
                        order.append(cur)
        return order

    def on(self, rule: str) -> bool:
        return rule not in self.without

    # -- ReusedOperandsOf / UpdateReusedOperandsForFusion ---------------------------------
    def reused_operands(self, n: Node) -> set:
        s = self.reused.get(id(n))
        if s is None:
            s = {id(n.operands[i]) for i in range(len(n.operands))
                 if _operand_element_use(n, i) == REUSE}
            self.reused[id(n)] = s
        return s

    def update_reused(self, producer: Node, fusion: Node) -> None:
        s = self.reused_operands(fusion)
        if id(producer) in s:
            s.discard(id(producer))
            s.update(id(o) for o in producer.operands)
        else:
            s.update(self.reused_operands(producer))

    # -- CpuInstructionFusion::ShouldFuse -------------------------------------------------
    def should_fuse(self, consumer: Node, i: int) -> tuple[str | None, str]:
        """(None or the refusal, the rule that decided)."""
        if consumer in self.skip and self.on("ShouldSkip"):
            return "Don't fuse instructions from custom fusions/calls", "ShouldSkip"
        producer = consumer.operands[i]
        if producer.opcode == "constant" and not _is_effective_scalar(producer.shape) and \
                self.on("ShouldFuse: non-scalar constant"):
            return "Don't fuse non-scalar constants.", "ShouldFuse: non-scalar constant"
        if _can_be_output_fused(producer, consumer):
            return None, "CanBeOutputFused"
        if _can_be_output_fused_into_some_operand(producer):
            return ("Bailing because producer can be output-fused into some operand.",
                    "CanBeOutputFusedIntoSomeOperand")
        if not _can_be_loop_fused(producer) and self.on("CanBeLoopFused"):
            return "Producer is not loop-fusible.", "CanBeLoopFused"
        if ((producer.opcode == "concatenate" and (len(producer.operands) > MAX_CONCATENATE_ARGUMENTS
                                                   or _minor_dim_concatenate(producer))) or
                (consumer.opcode == "concatenate" and (len(consumer.operands) > MAX_CONCATENATE_ARGUMENTS
                                                       or _minor_dim_concatenate(consumer)))):
            return "Concatenate fusion is inefficient.", "ShouldFuse: concatenate"
        if producer.opcode != "fusion" and is_expensive(producer) and \
                id(producer) in self.reused_operands(consumer) and self.on("IsExpensive and ReusesOperandElements"):
            return "Fusion is not profitable.", "IsExpensive and ReusesOperandElements"
        # InstructionFusion::ShouldFuse
        if producer is self.root:
            return "not fusing into the output of the root instruction", "InstructionFusion::ShouldFuse: root"
        would_duplicate = not (len(producer.users) == 1 and consumer in producer.users)
        if would_duplicate and is_expensive(producer) and not _always_duplicable(producer) and \
                self.on("FusionWouldDuplicate and IsExpensive"):
            return "expensive producer would be duplicated", "FusionWouldDuplicate and IsExpensive"
        if consumer.opcode == "fusion" and producer.opcode == "reduce":
            if sum(1 for c in consumer.fused_computation().clones if c.opcode == "reduce") > MAX_REDUCTIONS_IN_FUSION:
                return "Too many reductions inside single fusion.", "ShouldFuse: kMaxReductionsInFusion"
        if producer.opcode == "constant" and consumer.opcode != "fusion" and self.on("ShouldFuse: lone constant"):
            return "Not fusing: insufficient non-constant nodes.", "ShouldFuse: lone constant"
        if producer.opcode == "fusion":
            return "Not fusing: producer is itself a fusion node.", "ShouldFuse: producer fusion"
        if consumer.opcode == "fusion":
            if self.evaluation(consumer).code_duplication_too_high(producer):
                return "Code duplication too high", "FusionNodeIndexingEvaluation::CodeDuplicationTooHigh"
        if consumer.opcode == "dot" and _rank(consumer.shape) <= 1:
            a, b = consumer.operands[0], consumer.operands[1]
            if (_rank(a.shape) == 1 and i == 1 and a.shape.byte_size < FUSION_THRESHOLD_BYTES) or \
                    (_rank(b.shape) == 1 and i == 0 and b.shape.byte_size < FUSION_THRESHOLD_BYTES):
                return None, "ShouldFuse: small matrix-vector dot"
        if consumer.opcode == "fusion" and consumer.kind == "kLoop":
            return None, "ShouldFuse: consumer is a loop fusion"
        if _can_be_loop_fused(consumer) or not self.on("ShouldFuse: no fusible case"):
            return None, "ShouldFuse: consumer is loop-fusible"
        return "Not fusing: not found a fusible case", "ShouldFuse: no fusible case"

    def evaluation(self, fusion: Node) -> "_IndexingEvaluation":
        ev = self.evaluations.get(id(fusion))
        if ev is None:
            ev = self.evaluations[id(fusion)] = _IndexingEvaluation(fusion)
        return ev

    # -- ComputeGloballyUnfusible (generic and CPU) ---------------------------------------
    def globally_unfusible(self, post: list[Node]) -> set:
        reach = _reachability(post)
        do_not = set()
        cache: dict = {}

        def all_paths(producer: Node, consumer: Node) -> bool:
            if consumer is producer:
                return True
            if not _is_fusible(consumer):
                return False
            key = (id(producer), id(consumer))
            if key in cache:
                return cache[key]
            result = True
            for i, o in enumerate(consumer.operands):
                if id(producer) not in reach[id(o)]:
                    continue
                if id(o) in do_not or self.should_fuse(consumer, i)[0] is not None or \
                        not all_paths(producer, o):
                    result = False
                    break
            cache[key] = result
            return result

        for p in reversed(post):
            if _effectively_at_most_unary(p):
                continue
            if sum(_elements(o.shape) for o in dict.fromkeys(p.operands)) <= _elements(p.shape):
                continue
            if _is_fusible(p) and all(all_paths(p, u) for u in p.users):
                continue
            do_not.add(id(p))
        if self.coupled_softmax_rule:
            for p in post:
                if _coupled_reduction_shift_exp_producer(p):
                    do_not.add(id(p))
        return do_not

    # -- the fusions themselves --------------------------------------------------------------
    def new_fusion(self, producer: Node, consumer: Node) -> Node:
        """AddFusionInstruction: a loop fusion replaces a consumer that is not one yet."""
        if consumer.opcode == "fusion":
            return consumer
        return self._wrap(consumer, _unique(f"{producer.opcode}_{consumer.opcode}_fusion", self.names))

    def _wrap(self, consumer: Node, name: str) -> Node:
        """HloInstruction::CreateFusion around ``consumer``, which it replaces."""
        f = Node(name, "fusion", consumer.shape, None, "kLoop")
        f.origin = consumer.origin
        params: list = []   # the fused computation's parameter shapes, shared with its clones
        clone = Clone(consumer.name, consumer.opcode, consumer.shape, consumer.inst, params)
        f.fused = FusedComputation(clone, [clone], params)
        for o in consumer.operands:
            if o not in f.operands:
                f.operands.append(o)
                params.append(o.shape)
        clone.operands = [("param", f.operands.index(o)) for o in consumer.operands]
        for o in dict.fromkeys(consumer.operands):
            _drop_user(o, consumer)
            _add_user(o, f)
        for u in consumer.users:
            u.operands = [f if x is consumer else x for x in u.operands]
            _add_user(f, u)
        if consumer is self.root:
            self.root = f
        self._replace(consumer, f)
        return f

    @staticmethod
    def _clone(n: Node, into: FusedComputation) -> Clone:
        return Clone(n.name, n.opcode, n.shape, n.inst, into.params)

    def _replace(self, old: Node, new: Node) -> None:
        items = list(self.nodes.items())
        self.nodes = {(new.name if k == old.name else k): (new if v is old else v) for k, v in items}

    def fuse_into(self, fusion: Node, producer: Node) -> None:
        """HloFusionInstruction::FuseInstruction: clone the producer into the fusion, turn its
        parameter into the clone, and take the producer's operands as new parameters."""
        ev = self.evaluation(fusion)
        indexing_users = ev.remove_operand(producer)
        fc = fusion.fused_computation()
        k = fusion.operands.index(producer)
        clone = self._clone(producer, fc)
        # the parameter k becomes the clone; later parameters shift down by one
        fusion.operands.pop(k)
        fc.params.pop(k)

        def renumber(x):
            if isinstance(x, tuple):
                if x[1] == k:
                    return clone
                return ("param", x[1] - 1) if x[1] > k else x
            return x
        for c in fc.clones:
            c.operands = [renumber(x) for x in c.operands]
        for o in producer.operands:
            if o not in fusion.operands:
                fusion.operands.append(o)
                fc.params.append(o.shape)
                _add_user(o, fusion)
        clone.operands = [("param", fusion.operands.index(o)) for o in producer.operands]
        fc.clones.append(clone)
        _drop_user(producer, fusion)
        ev.add(clone, indexing_users)

    def remove(self, n: Node) -> None:
        for o in dict.fromkeys(n.operands):
            _drop_user(o, n)
        self.nodes.pop(n.name, None)

    # -- FusionWrapper (cpu/fusion_wrapper.cc, codegen/emitters/fusion_wrapper_base.cc) ----
    def wrap_leftovers(self) -> None:
        """The pass after ``fusion``: every instruction left that the CPU emits as a loop
        kernel becomes a fusion of its own (``wrapped_<opcode>``).  Traffic changes only where
        the instruction read one operand twice: a fusion reads it once."""
        for n in self.post_order():
            if n.opcode in WRAPPED or (n.opcode == "copy" and str(n.shape) != str(n.operands[0].shape)):
                self._wrap(n, _unique(f"wrapped_{n.opcode}", self.names))

    # -- InstructionFusion::Run -------------------------------------------------------------
    def run(self) -> FusionResult:
        post = self.post_order()
        do_not = self.globally_unfusible(post)
        queue: list[Node | None] = list(post)   # None: a node fused away since
        index = {id(n): i for i, n in enumerate(queue)}
        while True:
            while queue and queue[-1] is None:
                queue.pop()
            if not queue:
                break
            inst = queue.pop()
            assert inst is not None  # the Nones at the end were just dropped
            index.pop(id(inst), None)
            operands = [i for i, o in enumerate(inst.operands) if id(o) in index]
            operands.sort(key=lambda i: -index[id(inst.operands[i])])
            if not _is_fusible(inst) and inst.opcode != "fusion":
                continue
            for i in operands:
                producer = inst.operands[i]
                if not _is_fusible(producer):
                    continue
                reason: str | None
                if id(producer) in do_not and self.on("ComputeGloballyUnfusible"):
                    reason, rule = NOT_DUPLICABLE, "ComputeGloballyUnfusible"
                else:
                    reason, rule = self.should_fuse(inst, i)
                origin = inst.origin
                if reason is not None:
                    logged = "get-tuple-element" not in (producer.opcode, inst.opcode)
                    self.decisions.append(Prediction(self.comp.name, producer.name, inst.name, origin,
                                                     f"{reason} ; {MOF_REASON}", rule, logged))
                    continue
                fusion = self.new_fusion(producer, inst)
                self.update_reused(producer, fusion)
                self.fuse_into(fusion, producer)
                self.decisions.append(Prediction(self.comp.name, producer.name, inst.name, origin,
                                                 None, rule))
                index[id(fusion)] = len(queue)
                queue.append(fusion)
                if not producer.users:
                    do_not.discard(id(producer))
                    if id(producer) in index:
                        queue[index.pop(id(producer))] = None
                    self.remove(producer)
                if fusion is not inst:
                    do_not.discard(id(inst))
                break
        return FusionResult(self.comp.name, self.decisions, list(self.nodes.values()), self.root)


class _IndexingEvaluation:
    """FusionNodeIndexingEvaluation: how many times each fused instruction would be emitted."""

    def __init__(self, fusion: Node):
        self.fusion = fusion
        fc = fusion.fused_computation()
        self.indexing_users: dict[int, set] = {id(fc.root): {id(fusion)}}
        self.count: dict[int, int] = {id(fusion): 1}
        self.by_id: dict[int, object] = {id(fusion): fusion}
        order = _clone_post_order(fc)
        for c in reversed(order):
            self._update_count(c)
            self._update_operands(c)

    def _key(self, operand):
        """A fused parameter stands for the fusion operand it reads."""
        if isinstance(operand, tuple):
            node = self.fusion.operands[operand[1]]
            self.by_id[id(node)] = node
            return id(node), node.shape
        self.by_id[id(operand)] = operand
        return id(operand), operand.shape

    def _update_count(self, c) -> None:
        self.count[id(c)] = sum(self.count[u] for u in self.indexing_users.get(id(c), ()))

    def _update_operands(self, c) -> None:
        mine = self.indexing_users.setdefault(id(c), set())
        for o in c.operands:
            key, shape = self._key(o)
            target = self.indexing_users.setdefault(key, set())
            if c.opcode == "transpose" or _same_dims(shape, c.shape):
                target.update(mine)
            else:
                target.add(id(c))

    def code_duplication_too_high(self, producer: Node) -> bool:
        if producer.opcode == "broadcast":
            return False
        emitted = sum(self.count[u] for u in self.indexing_users.get(id(producer), ()))
        return emitted > ALLOWED_CODE_DUPLICATION or (
            producer.opcode in INVALIDATES_CACHE and (emitted > 1 or _user_count(producer) > 1))

    def remove_operand(self, producer: Node) -> set:
        return self.indexing_users.pop(id(producer), set())

    def add(self, clone: Clone, indexing_users: set) -> None:
        self.indexing_users[id(clone)] = set(indexing_users)
        self._update_count(clone)
        self._update_operands(clone)


def _user_count(n: Node) -> int:
    """UserCount in fusion_node_indexing_evaluation.cc: through a fusion, its parameter's users."""
    total = 0
    for u in n.users:
        if u.opcode == "fusion":
            total += len(u.fused_computation().users_of_param(u.operands.index(n)))
        else:
            total += 1
    return total


def _same_dims(a: Shape, b: Shape) -> bool:
    """Shape::Equal().IgnoreElementType(): same dimensions and layout."""
    if a.is_tuple or b.is_tuple:
        return str(a) == str(b)
    return a.dims == b.dims and a.minor_to_major == b.minor_to_major


def _clone_post_order(fc: FusedComputation) -> list:
    order, seen = [], set()
    stack = [(fc.root, False)]
    while stack:
        c, done = stack.pop()
        if isinstance(c, tuple):
            continue
        if done:
            if id(c) not in seen:
                seen.add(id(c))
                order.append(c)
            continue
        if id(c) in seen:
            continue
        stack.append((c, True))
        for o in reversed(c.operands):
            stack.append((o, False))
    return order


# ---- helpers of ShouldFuse -----------------------------------------------------------------

def _always_duplicable(n: Node) -> bool:
    """IsAlwaysDuplicable: a widening convert, or a broadcast."""
    if n.opcode == "broadcast":
        return True
    return n.opcode == "convert" and bool(n.operands) and n.operands[0].shape.byte_size < n.shape.byte_size


def _is_matvec_dot(n: Node) -> bool:
    """IsNonComplexNonBatchedMatrixVectorDot."""
    return (n.opcode == "dot" and n.shape.element_type not in _COMPLEX and _rank(n.shape) <= 1
            and not _int_list(n.attr("lhs_batch_dims")))


def _can_be_output_fused(producer: Node, consumer: Node) -> bool:
    return (consumer.opcode == "add" and _is_matvec_dot(producer) and len(producer.users) == 1
            and producer.users[0].operands.count(producer) == 1)


def _can_be_output_fused_into_some_operand(consumer: Node) -> bool:
    return consumer.opcode == "add" and any(_can_be_output_fused(o, consumer) for o in consumer.operands[:2])


def _minor_dim_concatenate(n: Node) -> bool:
    if _rank(n.shape) <= 1:
        return False
    dim = _int_list(n.attr("dimensions"))[0]
    return dim == _minor_dim(n.shape) and n.shape.dims[dim] >= 128


def _effectively_at_most_unary(n: Node) -> bool:
    out = max((_true_rank(s) for s in n.shape.leaves()), default=0)
    big = 0
    for o in n.operands:
        if o.opcode in ("broadcast", "iota"):
            continue
        if o.opcode == "constant" and _is_effective_scalar(o.shape):
            continue
        if (_true_rank(o.shape) if not o.shape.is_tuple else 0) >= out:
            big += 1
    return big <= 1


def _reachability(post: list[Node]) -> dict:
    """For each node, the ids of the nodes it is reachable from (itself included)."""
    reach: dict[int, set] = {}
    for n in post:
        s = {id(n)}
        for o in n.operands:
            s |= reach[id(o)]
        reach[id(n)] = s
    return reach


def _coupled_reduction_shift_exp_producer(n: Node) -> bool:
    """CpuInstructionFusion::ComputeGloballyUnfusible's addition
    (IsCoupledReductionShiftExpProducer): an elementwise producer read by a row-max reduce
    and by the subtract that shifts it before exp is computed once, never duplicated."""
    if n.opcode == "fusion" or not _is_elementwise(n):
        return False
    reduce = next((u for u in n.users if u.opcode == "reduce" and u.operands[0] is n
                   and u.max_reduce), None)
    if reduce is None:
        return False

    def via_broadcast(x, target):
        return x.opcode == "broadcast" and x.operands[0] is target

    for s in n.users:
        if s.opcode != "subtract":
            continue
        a, b = s.operands[0], s.operands[1]
        uses_shift = a is n or b is n or via_broadcast(a, n) or via_broadcast(b, n)
        uses_reduce = via_broadcast(a, reduce) or via_broadcast(b, reduce)
        if uses_shift and uses_reduce and any(u.opcode == "exponential" for u in s.users):
            return True
    return False


def _unique(prefix: str, names: set) -> str:
    """NameUniquer::GetUniqueName, approximately: the prefix, else prefix.N for the first
    N not taken in the module.  (XLA's uniquer also remembers names of instructions removed
    by earlier passes, so a suffix can differ; decisions are compared by the instruction a
    fusion grew from, which does not.)"""
    name, k = prefix, 0
    while name in names:
        k += 1
        name = f"{prefix}.{k}"
    names.add(name)
    return name


# ---- the module ---------------------------------------------------------------------------------

def fused_computations_order(module: HloModule) -> list[HloComputation]:
    """The computations the pass visits (MakeNonfusionComputations, callees first), without
    fusion computations and the scalar bodies of reduce, sort, map ... (IsEmbeddedComputation).

    The entry computation and what it calls come first; then the computations no instruction
    calls (``uncalled_computations``), in the module's order: XLA keeps a computation whose
    caller a pass removed until a later clean-up, and the fusion pass visits it like any other
    (the library rewriter leaves such a ``fused_computation.N`` behind, and the pass logs
    decisions inside it)."""
    embedded, order, seen = set(), [], set()
    for comp in module.computations.values():
        for inst in comp.instructions:
            if inst.opcode in EMBEDDING_OPCODES:
                embedded.update(inst.called)

    def visit(name):
        if name in seen or name not in module.computations:
            return
        seen.add(name)
        comp = module.computations[name]
        for callee in comp.callees:
            visit(callee)
        order.append(comp)

    visit(module.entry.name)
    for name in uncalled_computations(module):
        visit(name)
    return [c for c in order if c.name not in embedded]


def uncalled_computations(module: HloModule) -> list[str]:
    """Computations other than the entry that no instruction of the module calls, in the
    module's order (left behind by a pass that replaced their caller)."""
    called = {c for comp in module.computations.values() for inst in comp.instructions
              for c in inst.called}
    return [name for name, comp in module.computations.items()
            if name not in called and comp is not module.entry]


# The first jaxlib whose XLA has CpuInstructionFusion's coupled-softmax rule (PR #44738):
# jaxlib 0.10.2's and 0.11.0's duplicate the stable-softmax producer, 0.12.0.1's keeps it
# (tests/xla_fusion/test_fusion_policy.py checks the model against the jaxlib installed).
COUPLED_SOFTMAX_SINCE = (0, 12, 0)


def installed_xla_has_coupled_softmax_rule() -> bool:
    """Whether the installed jaxlib's XLA keeps the stable-softmax producer from being
    duplicated (``COUPLED_SOFTMAX_SINCE``); False when jaxlib is not installed."""
    from importlib import metadata
    try:
        version = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return False
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts) >= COUPLED_SOFTMAX_SINCE


def predict(module: HloModule, *, fuse: bool = True, wrap: bool = False,
            coupled_softmax_rule: bool | None = None, without=()) -> list[FusionResult]:
    """Replay the CPU fusion pass on ``module`` (the snapshot just before it): per computation
    it visits, every decision in the order the pass makes it, and what is left after it.

    ``coupled_softmax_rule``: None (the default) follows the XLA of the jaxlib installed
    (``installed_xla_has_coupled_softmax_rule``); say True or False for a dump that another
    jaxlib wrote.

    ``wrap``: then the fusion wrapper that follows it, so that the computations left are the
    kernels the program runs.  ``fuse=False`` skips the fusion pass (the program compiled with
    ``xla_disable_hlo_passes=fusion``).  ``without``: rules (by the names in ``RULES``) the
    replay leaves out, to show what each one decides."""
    if coupled_softmax_rule is None:
        coupled_softmax_rule = installed_xla_has_coupled_softmax_rule()
    names = {i.name for c in module.computations.values() for i in c.instructions}
    out = []
    for comp in fused_computations_order(module):
        p = _Pass(module, comp, names, coupled_softmax_rule=coupled_softmax_rule,
                  without=frozenset(without))
        for n in p.nodes.values():
            if n.opcode == "reduce" and n.inst is not None:
                region = module.computations.get(n.inst.attrs.get("to_apply", "").lstrip("%"))
                n.max_reduce = region is not None and region.root.opcode == "maximum"  # IsMaxReduction
        try:
            result = p.run() if fuse else FusionResult(comp.name, [], list(p.nodes.values()), p.root)
            if wrap:
                p.wrap_leftovers()
                result = FusionResult(comp.name, result.decisions, list(p.nodes.values()), p.root)
            out.append(result)
        except (KeyError, IndexError, ValueError) as e:
            raise FusionModelError(f"module {module.name}, computation {comp.name}: the model "
                                   f"cannot replay the fusion pass here ({type(e).__name__}: {e})") from None
    return out


# ---- the module after the pass, as HLO text ---------------------------------------------------

def fused_module_text(module: HloModule, results: list[FusionResult]) -> str:
    """The module as the model says the pass leaves it, as HLO text: each computation the
    pass visited rewritten with its fusions (and their fused computations), every other
    computation as dumped.  ``traffic.module_traffic`` of it is the predicted traffic of the
    fused program, spill-style, by the same rules as the dumps'."""
    by_name = {r.computation: r for r in results}
    blocks, count = [], [0]
    for comp in module.computations.values():
        r = by_name.get(comp.name)
        if r is None:
            blocks.append(_computation_text(comp))
            continue
        lines = []
        assert r.root is not None, "predict gives every result its root"
        nodes = _final_post_order(r.nodes, r.root)
        for n in nodes:
            if n.opcode == "fusion" and n.inst is None:
                count[0] += 1
                fname = f"{n.name}.model_computation"
                blocks.append(_fused_text(fname, n, count[0]))
                body = f"{n.shape} fusion({_ops(n.operands)}), kind={n.kind}, calls=%{fname}"
            else:
                body = _node_body(n)
            lines.append(f"  {'ROOT ' if n is r.root else ''}%{n.name} = {body}")
        head = comp.header
        blocks.append("\n".join([head] + lines + ["}"]))
    return module.header + "\n\n" + "\n\n".join(blocks) + "\n"


def _final_post_order(nodes: list[Node], root: Node) -> list[Node]:
    """Parameters first, then everything the root needs, operands before users."""
    order, seen = [], set()

    def visit(n):
        stack = [(n, False)]
        while stack:
            x, done = stack.pop()
            if done:
                if id(x) not in seen:
                    seen.add(id(x))
                    order.append(x)
                continue
            if id(x) in seen:
                continue
            stack.append((x, True))
            for o in reversed(x.operands):
                stack.append((o, False))
    for n in [n for n in nodes if n.opcode == "parameter"] + [root]:
        visit(n)
    return order


def _ops(operands) -> str:
    return ", ".join(f"%{o.name}" for o in operands)


def _attrs(inst: Instruction | None) -> str:
    if inst is None:
        return ""
    return "".join(f", {k}={v}" for k, v in inst.attrs.items() if k != "metadata")


def _node_body(n: Node) -> str:
    inst = n.inst
    if inst.opcode in ("constant", "parameter"):
        args = inst.operand_text
    else:
        args = _ops(n.operands)
    return f"{n.shape} {n.opcode}({args}){_attrs(inst)}"


def _fused_text(fname: str, fusion: Node, k: int) -> str:
    fc = fusion.fused_computation()
    names = {}
    lines = [f"  %p{k}.{i} = {s} parameter({i})" for i, s in enumerate(fc.params)]
    order = _clone_post_order(fc)
    for c in order:
        names[id(c)] = f"{c.name}.m{k}"

    def ref(x):
        return f"%p{k}.{x[1]}" if isinstance(x, tuple) else f"%{names[id(x)]}"
    for c in order:
        inst = c.inst
        args = inst.operand_text if inst.opcode in ("constant", "parameter") else \
            ", ".join(ref(x) for x in c.operands)
        root = "ROOT " if c is fc.root else ""
        lines.append(f"  {root}%{names[id(c)]} = {c.shape} {c.opcode}({args}){_attrs(inst)}")
    return "\n".join([f"%{fname} {{"] + lines + ["}"])


def _computation_text(comp: HloComputation) -> str:
    return "\n".join([comp.header] + [f"  {i.line.strip()}" if not i.line.startswith(" ") else i.line
                                      for i in comp.instructions] + ["}"])


def undo_fusion_bytes(module: HloModule) -> tuple[int, int]:
    """Bytes accessed (spill-style, ``traffic.module_traffic``) of the program as the model
    says it runs without the fusion pass and with it, both after the fusion wrapper:
    (unfused, fused).  Their difference is what undoing the pass costs in memory traffic."""
    name = module.source or module.name
    unfused = parse_module(fused_module_text(module, predict(module, fuse=False, wrap=True)),
                           source=f"{name} (model: fusion disabled)")
    fused = parse_module(fused_module_text(module, predict(module, wrap=True)),
                         source=f"{name} (model: after fusion)")
    return module_traffic(unfused).bytes_accessed, module_traffic(fused).bytes_accessed
