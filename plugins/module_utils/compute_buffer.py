# -*- coding: utf-8 -*-
# Copyright: contributors to gpulab.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The compute buffer llama.cpp's scheduler reserves on each device, by building the graph.

Pure functions. llama.cpp 0c1e570 sizes each device's compute buffer by allocating its
worst-case graph (src/llama-context.cpp sched_reserve: a prompt ubatch of min(n_ctx, n_ubatch)
tokens over n_seq_max sequences, one output per sequence, then a token-generation graph, the
buffer the larger of the two) with ggml-alloc's graph allocator. This module does the same in
miniature: it builds the graph a family's model file builds (src/models/<family>.cpp with
src/llama-graph.cpp), with the tensor shapes ggml gives each op, orders it as
ggml_build_forward_expand does, splits it over the devices as ggml_backend_sched does (with
pipeline parallelism, four copies of every split input kept for the whole graph), and replays
ggml/src/ggml-alloc.c (in-place reuse, views, best-fit free blocks, 32-byte alignment). The peak
of each device's allocator is the buffer size.

It models the CPU backend's kernels (what an RPC server of a CPU build runs): a GPU backend can
fuse ops or ask for more room for some (ggml_backend_buft_get_alloc_size), so there the figure can
differ and the plan's per-device margin covers it. weight(name) gives a weight tensor's dims (None
when the model lacks it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

F32, F16, Q8_0, I32, I64 = 0, 1, 8, 26, 27
# (block size, bytes per block) of the types a graph holds
_TYPES = {F32: (1, 4), F16: (1, 2), Q8_0: (32, 34), I32: (1, 4), I64: (1, 8), 30: (1, 2), 2: (32, 18),
          3: (32, 20), 6: (32, 22), 7: (32, 24), 20: (32, 18)}
ALIGNMENT = 32  # ggml-impl.h TENSOR_ALIGNMENT: the CPU buffer type's alignment
MAX_COPIES = 4  # ggml-backend.cpp GGML_SCHED_MAX_COPIES
CPU = -1

# ggml-alloc.c ggml_op_can_inplace (those the families use)
_INPLACE = frozenset(("ADD", "MUL", "DIV", "SCALE", "RMS_NORM", "ROPE", "SOFT_MAX", "CLAMP", "UNARY", "SQR", "SQRT",
                      "ADD_ID"))
_VIEW_OPS = frozenset(("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"))


def row_bytes(ggml_type, n):
    block, size = _TYPES[ggml_type]
    return size * n // block


class Tensor:
    """A ggml tensor: shape, strides, op, sources, the tensor it views and where it lives."""

    __slots__ = ("ne", "nb", "type", "op", "src", "view_src", "name", "dev", "external", "input", "output")

    def __init__(self, ne, ggml_type, op="NONE", src=(), view_src=None, nb=None, name="", dev=None):
        self.ne = tuple(ne) + (1,) * (4 - len(ne))
        self.type = ggml_type
        if nb is None:
            nb = [_TYPES[ggml_type][1]]
            nb.append(row_bytes(ggml_type, self.ne[0]))
            nb.append(nb[1] * self.ne[1])
            nb.append(nb[2] * self.ne[2])
        self.nb = tuple(nb)
        self.op = op
        self.src = list(src)
        if view_src is not None and view_src.view_src is not None:
            view_src = view_src.view_src
        self.view_src = view_src
        self.name = name
        self.dev = dev
        self.external = False  # weights and caches: allocated outside the compute buffer
        self.input = False
        self.output = False

    def nbytes(self):
        """ggml_nbytes."""
        if any(n == 0 for n in self.ne):
            return 0
        size = row_bytes(self.type, self.ne[0])
        for i in range(1, 4):
            size += (self.ne[i] - 1) * self.nb[i]
        return size

    def nelements(self):
        return self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]


class Graph:
    """ggml_cgraph built by ggml_build_forward_expand (srcs depth first, left to right); new
    tensors take the device the builder is at (dev)."""

    def __init__(self):
        self.nodes = []
        self.leafs = []
        self._seen = set()
        self.dev = CPU

    # -- tensors
    def new(self, ne, ggml_type=F32, op="NONE", src=(), name=""):
        return Tensor(ne, ggml_type, op, src, name=name, dev=self.dev)

    def inp(self, ne, ggml_type, name):
        t = Tensor(ne, ggml_type, name=name, dev=CPU)
        t.input = True
        return t

    def external(self, ne, ggml_type, dev, name=""):
        t = Tensor(ne, ggml_type, name=name, dev=dev)
        t.external = True
        return t

    def view(self, a, ne, nb, op="VIEW"):
        """A view op: on its source's device (ggml_backend_sched_split_graph pass 4), so a split
        on another device copies it in."""
        nb = (a.nb[0],) + tuple(nb) + tuple(a.nb[len(nb) + 1:]) if len(nb) < 4 else nb
        dev = (a.view_src or a).dev
        return Tensor(ne, a.type, op, (a,), view_src=a, nb=nb, dev=dev)

    def reshape(self, a, *ne):
        ne = tuple(ne) + (1,) * (4 - len(ne))
        nb = Tensor(ne, a.type).nb
        return self.view(a, ne, nb, "RESHAPE")

    def view_nd(self, a, ne, nb):
        """ggml_view_Nd (the offset does not change what is allocated)."""
        ne = tuple(ne) + (1,) * (4 - len(ne))
        nb = (a.nb[0],) + tuple(nb)
        nb = nb + tuple(nb[-1] * ne[i] for i in range(len(nb), 4))
        return self.view(a, ne, nb)

    def permute(self, a, p0, p1, p2, p3):
        ne = [0] * 4
        nb = [0] * 4
        for src_axis, dst_axis in enumerate((p0, p1, p2, p3)):
            ne[dst_axis] = a.ne[src_axis]
            nb[dst_axis] = a.nb[src_axis]
        return self.view(a, ne, nb, "PERMUTE")

    def transpose(self, a):
        return self.permute(a, 1, 0, 2, 3)

    def same(self, op, a, *src):
        return self.new(a.ne, a.type if op not in ("RMS_NORM", "SOFT_MAX", "ROPE") else F32, op, (a,) + src)

    def mul_mat(self, a, b):
        return self.new((a.ne[1], b.ne[1], b.ne[2], b.ne[3]), F32, "MUL_MAT", (a, b))

    def mul_mat_id(self, a, b, ids):
        return self.new((a.ne[1], ids.ne[0], b.ne[2], 1), F32, "MUL_MAT_ID", (a, b, ids))

    def get_rows(self, a, b):
        return self.new((a.ne[0], b.ne[0], b.ne[1], b.ne[2]), I32 if a.type == I32 else F32, "GET_ROWS", (a, b))

    def cont(self, a, *ne):
        return self.new(ne or a.ne, a.type, "CONT", (a,))

    def cast(self, a, ggml_type):
        return self.new(a.ne, ggml_type, "CPY", (a,))

    def write(self, a, dst):
        """ggml_cpy into a cache tensor: a view of the cache, nothing allocated."""
        return Tensor(dst.ne, dst.type, "CPY", (a, dst), view_src=dst, nb=dst.nb, dev=self.dev)

    def set_rows(self, a, b, idxs):
        return self.inplace("SET_ROWS", a, b, idxs)

    def inplace(self, op, a, *src):
        """ggml_<op>_inplace and ggml_set_rows: a view of a, nothing allocated."""
        return Tensor(a.ne, a.type, op, (a,) + src, view_src=a, nb=a.nb, dev=self.dev)

    def sum_rows(self, a):
        return self.new((1, a.ne[1], a.ne[2], a.ne[3]), F32, "SUM_ROWS", (a,))

    def argsort_top_k(self, a, k):
        s = self.new(a.ne, I32, "ARGSORT", (a,))
        return s, self.view_nd(s, (k, s.ne[1], s.ne[2], s.ne[3]), (s.nb[1], s.nb[2], s.nb[3]))

    def glu(self, a, b):
        return self.new(a.ne, F32, "GLU", (a, b))

    def flash_attn(self, q, k, v, mask, sinks=None):
        src = (q, k, v, mask) + ((sinks,) if sinks is not None else ())
        return self.new((v.ne[0], q.ne[2], q.ne[1], q.ne[3]), F32, "FLASH_ATTN_EXT", src)

    # -- order
    def expand(self, t):
        stack = [(t, 0)]
        while stack:
            node, i = stack.pop()
            if i == 0:
                if id(node) in self._seen:
                    continue
                self._seen.add(id(node))
            if i < len(node.src):
                stack.append((node, i + 1))
                if node.src[i] is not None and id(node.src[i]) not in self._seen:
                    stack.append((node.src[i], 0))
                continue
            (self.leafs if node.op == "NONE" else self.nodes).append(node)


# ---------------------------------------------------------------- the allocator (ggml-alloc.c)

class _DynAllocator:
    """ggml_dyn_tallocr with one chunk: free blocks sorted by offset, best fit among all but the
    last, else the last block; max_size is the buffer the graph needs."""

    def __init__(self):
        self.blocks = [[0, 1 << 62]]
        self.max_size = 0

    def alloc(self, size):
        size = -(-size // ALIGNMENT) * ALIGNMENT
        best = None
        best_size = None
        for i, (_offset, bsize) in enumerate(self.blocks[:-1]):
            if bsize >= size and (best_size is None or bsize <= best_size):
                best, best_size = i, bsize
        if best is None:
            best = len(self.blocks) - 1
        block = self.blocks[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del self.blocks[best]
        self.max_size = max(self.max_size, offset + size)
        return offset

    def free(self, offset, size):
        size = -(-size // ALIGNMENT) * ALIGNMENT
        blocks = self.blocks
        for i, block in enumerate(blocks):
            if block[0] + block[1] == offset:
                block[1] += size
                if i < len(blocks) - 1 and block[0] + block[1] == blocks[i + 1][0]:
                    block[1] += blocks[i + 1][1]
                    del blocks[i + 1]
                return
            if offset + size == block[0]:
                block[0] = offset
                block[1] += size
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == block[0]:
                    blocks[i - 1][1] += block[1]
                    del blocks[i]
                return
        pos = 0
        while pos < len(blocks) and blocks[pos][0] < offset:
            pos += 1
        blocks.insert(pos, [offset, size])


def _same_layout(a, b):
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


def allocate(nodes, node_dev, leafs, leaf_dev):
    """ggml_gallocr_alloc_graph_impl over the scheduler's graph: {device: peak bytes}. A view
    parent is never reused in place here: gallocr marks only tensors it allocates as its own."""
    allocs = {}
    state = {}  # id(tensor) -> [allocated, device, offset, n_children, n_views]

    def hn(t):
        entry = state.get(id(t))
        if entry is None:
            entry = state[id(t)] = [False, None, 0, 0, 0]
        return entry

    def aligned(t):
        return -(-t.nbytes() // ALIGNMENT) * ALIGNMENT

    def allocate_node(t, dev):
        h = hn(t)
        if t.external or h[0] or t.view_src is not None:
            return
        h[0] = True
        if t.op in _INPLACE:
            for parent in t.src:
                if parent is None or not hn(parent)[0] or parent.output or not _same_layout(t, parent):
                    continue
                p = hn(parent)
                if p[3] == 1 and p[4] == 0:
                    h[1], h[2] = p[1], p[2]
                    p[0] = False
                    extra = aligned(parent) - aligned(t)
                    if extra > 0:
                        allocs[p[1]].free(p[2] + aligned(t), extra)
                    return
        if dev not in allocs:
            allocs[dev] = _DynAllocator()
        h[1] = dev
        h[2] = allocs[dev].alloc(t.nbytes())

    def free_node(t):
        if not t.output:
            h = hn(t)
            allocs[h[1]].free(h[2], t.nbytes())
            h[0] = False

    for leaf, dev in zip(leafs, leaf_dev):
        allocate_node(leaf, dev)
    for node, dev in zip(nodes, node_dev):
        if node.view_src is not None and node.op != "NONE":
            hn(node.view_src)[4] += 1
        if node.input:
            allocate_node(node, dev)
        for src in node.src:
            if src is not None:
                hn(src)[3] += 1
                if src.input:
                    allocate_node(src, dev)
    for node, dev in zip(nodes, node_dev):
        for parent in node.src:
            if parent is not None:
                allocate_node(parent, dev)
        allocate_node(node, dev)
        for parent in node.src:
            if parent is None:
                continue
            p = hn(parent)
            p[3] -= 1
            if p[3] == 0 and p[4] == 0:
                if parent.view_src is not None:
                    vs = hn(parent.view_src)
                    vs[4] -= 1
                    if vs[4] == 0 and vs[3] == 0 and vs[0]:
                        free_node(parent.view_src)
                elif p[0]:
                    free_node(parent)
    return dict((dev, a.max_size) for dev, a in allocs.items())


# ---------------------------------------------------------------- the scheduler (ggml-backend.cpp)

def schedule(graph, n_copies):
    """ggml_backend_sched_split_graph: splits of consecutive nodes on one device, every source
    from another device copied in (n_copies copies kept as leafs with pipeline parallelism), then
    the scheduler's graph: (nodes, node devices, leafs, leaf devices)."""
    copies = {}
    splits = []
    for node in graph.nodes:
        if node.op in _VIEW_OPS or (node.view_src is not None and node.op == "NONE"):
            if splits:
                splits[-1][2].append(node)
            continue
        if not splits or splits[-1][0] != node.dev:
            splits.append([node.dev, [], []])
        split = splits[-1]
        for j, src in enumerate(node.src):
            if src is None or src.dev == split[0]:
                continue
            key = (id(src), split[0])
            if key not in copies:
                made = []
                for _c in range(n_copies):
                    t = Tensor(src.ne, src.type, nb=src.nb, name=src.name + "#copy", dev=split[0])
                    if n_copies > 1:
                        t.input = t.output = True
                    made.append(t)
                copies[key] = made
                split[1].append(src)
            node.src[j] = copies[key][0]
        split[2].append(node)
    nodes, node_dev, leafs, leaf_dev = [], [], [], []
    for dev, inputs, members in splits:
        for src in inputs:
            dep = Tensor(src.ne, src.type, "NONE", (src,), view_src=src, nb=src.nb, dev=src.dev)
            nodes += [dep, copies[(id(src), dev)][0]]
            node_dev += [src.dev, dev]
        nodes += members
        node_dev += [m.dev for m in members]
    if n_copies > 1:
        for leaf in graph.leafs:
            if leaf.input:
                leaf.output = True
                for c in range(n_copies):
                    t = leaf
                    if c:
                        t = Tensor(leaf.ne, leaf.type, nb=leaf.nb, dev=leaf.dev)
                        t.input = t.output = True
                    leafs.append(t)
                    leaf_dev.append(leaf.dev)
        for dev, inputs, _members in splits:
            for src in inputs:
                leafs += copies[(id(src), dev)]
                leaf_dev += [dev] * n_copies
    leafs += graph.leafs
    leaf_dev += [leaf.dev for leaf in graph.leafs]
    return nodes, node_dev, leafs, leaf_dev


# ---------------------------------------------------------------- the graph of a model (src/llama-graph.cpp)

class Builder:
    """llm_graph_context for a worst-case ubatch: n_tokens tokens of n_seqs sequences, n_outputs
    outputs, the KV cache of kv_size cells per stream (n_stream streams) and flash attention or
    not. hp: the hparams the families read; weight(name): dims or None; layer_dev: device of
    each layer and of the output (last entry)."""

    def __init__(self, hp, weight, layer_dev, n_tokens, n_seqs, n_outputs, flash_attn, type_k, type_v):
        self.hp = hp
        self.weight_dims = weight
        self.layer_dev = layer_dev
        self.n_tokens = n_tokens
        self.n_seqs = n_seqs
        self.n_outputs = n_outputs
        self.flash_attn = flash_attn
        self.type_k = type_k
        self.type_v = type_v
        self.g = Graph()

    def layers(self):
        """The layers built: all, or those hp["built"] names (each device's own buffer needs only
        representative layers of its range: representative_layers)."""
        built = self.hp.get("built")
        return range(self.hp["n_layer"]) if built is None else sorted(built)

    def w(self, name, il=None, dev=None):
        full = name if il is None else "blk.%d.%s.weight" % (il, name)
        dims = self.weight_dims(full)
        if dims is None:
            return None
        if dev is None:
            dev = self.layer_dev[il] if il is not None else self.layer_dev[-1]
        return self.g.external(dims, F16, dev, full)

    def at(self, il):
        self.g.dev = self.layer_dev[il]

    # build_inp_embd, build_inp_pos, build_inp_out_ids
    def inp_embd(self):
        g = self.g
        g.dev = CPU
        tokens = g.inp((self.n_tokens,), I32, "inp_tokens")
        cur = g.get_rows(self.w("token_embd.weight", dev=CPU), tokens)
        g.expand(cur)
        # ggml_build_forward_select keeps the embeddings input in the graph beside the tokens
        g.expand(g.inp((cur.ne[0], self.n_tokens), F32, "inp_embd"))
        return cur

    def inp_pos(self):
        return self.g.inp((self.n_tokens * self.hp.get("n_pos_per_embd", 1),), I32, "inp_pos")

    def inp_out_ids(self):
        return self.g.inp((self.n_outputs,), I32, "out_ids")

    def norm(self, cur, weight):
        g = self.g
        cur = g.same("RMS_NORM", cur)
        if weight is not None:
            cur = g.same("MUL", cur, weight)
        return cur

    # build_attn_inp_kv and the cache of a layer (src/llama-kv-cache.cpp)
    def attn_inp(self, kv_size, n_stream, n_embd_v_gqa_max, v_idxs=True):
        g = self.g
        n_tokens = self.n_tokens
        inp = {"kv_size": kv_size, "n_stream": n_stream,
               "k_idxs": g.inp((n_tokens,), I64, "attn_inp_k_idxs"),
               "v_idxs": g.inp((n_tokens if self.flash_attn else n_tokens * n_embd_v_gqa_max,), I64,
                               "attn_inp_v_idxs") if v_idxs else None,
               "mask": g.inp((kv_size, n_tokens // n_stream, 1, n_stream), F16 if self.flash_attn else F32,
                             "attn_inp_kq_mask")}
        # src/llama-kv-cache.cpp attn_rot_k / attn_rot_v: a quantized cache rotates by a Hadamard
        # matrix (the largest power of two >= 64 dividing the K head for K, 64 for V)
        head_k, head_v = self.hp["head_k"], self.hp["head_v"]
        inp["k_rot"] = inp["v_rot"] = None
        if self.type_k not in (F32, F16, 30) and head_k % 64 == 0 and v_idxs:
            n = 64
            while head_k % (n * 2) == 0:
                n *= 2
            inp["k_rot"] = g.inp((n, n), F32, "attn_inp_k_rot")
        if self.type_v not in (F32, F16, 30) and head_v % 64 == 0 and v_idxs:
            inp["v_rot"] = g.inp((64, 64), F32, "attn_inp_v_rot")
        return inp

    def hadamard(self, cur, rot):
        """llama_mul_mat_hadamard."""
        g = self.g
        n = rot.ne[0]
        if cur.nb == Tensor(cur.ne, cur.type).nb:
            res = g.reshape(cur, n, cur.nelements() // n)
        else:
            res = g.cont(cur, n, cur.nelements() // n)
        return g.reshape(g.mul_mat(rot, res), *cur.ne)

    def cache(self, inp, il, n_embd_k_gqa, n_embd_v_gqa):
        dev = self.layer_dev[il]
        k = self.g.external((n_embd_k_gqa, inp["kv_size"], inp["n_stream"]), self.type_k, dev, "cache_k_l%d" % il)
        v = self.g.external((n_embd_v_gqa, inp["kv_size"], inp["n_stream"]), self.type_v, dev,
                            "cache_v_l%d" % il) if n_embd_v_gqa else None
        return k, v

    def cpy_k(self, inp, k, k_cur):
        g = self.g
        n_gqa = k_cur.ne[0] * k_cur.ne[1]
        k_cur = g.view_nd(k_cur, (n_gqa, k_cur.ne[2]), (k_cur.nb[2],))
        if inp["n_stream"] > 1:
            k = g.reshape(k, n_gqa, inp["kv_size"] * inp["n_stream"])
        return g.set_rows(k, k_cur, inp["k_idxs"])

    def cpy_v(self, inp, v, v_cur):
        g = self.g
        n_gqa = v_cur.ne[0] * v_cur.ne[1]
        if self.flash_attn:
            v_cur = g.view_nd(v_cur, (n_gqa, v_cur.ne[2]), (v_cur.nb[2],))
            if inp["n_stream"] > 1:
                v = g.reshape(v, n_gqa, inp["kv_size"] * inp["n_stream"])
            return g.set_rows(v, v_cur, inp["v_idxs"])
        if row_bytes(v_cur.type, n_gqa) == v_cur.nb[2]:
            v_cur = g.reshape(v_cur, n_gqa, v_cur.ne[2])
        else:
            v_cur = g.cont(v_cur, n_gqa, v_cur.ne[2])
        v_view = g.reshape(v, 1, v.nelements())
        v_cur = g.reshape(v_cur, 1, v_cur.nelements())
        return g.set_rows(v_view, v_cur, inp["v_idxs"])

    def get_k(self, inp, k, head_k, n_head_kv):
        g = self.g
        return g.view(k, (head_k, n_head_kv, inp["kv_size"], inp["n_stream"]),
                      (k.nb[0], row_bytes(k.type, head_k), k.nb[1], k.nb[2]))

    def get_v(self, inp, v, head_v, n_head_kv):
        g = self.g
        if self.flash_attn:
            return g.view(v, (head_v, n_head_kv, inp["kv_size"], inp["n_stream"]),
                          (v.nb[0], row_bytes(v.type, head_v), v.nb[1], v.nb[2]))
        kv = inp["kv_size"]
        return g.view(v, (kv, n_head_kv, head_v, inp["n_stream"]),
                      (v.nb[0], row_bytes(v.type, kv * head_v), row_bytes(v.type, kv), v.nb[2]))

    def attn_mha(self, q, k, v, mask, sinks=None, v_mla=None, kq_b=None):
        """build_attn_mha."""
        g = self.g
        v_trans = v.nb[1] > v.nb[2]
        n_stream = k.ne[3]
        q = g.view(q, (q.ne[0], q.ne[1], q.ne[2] // n_stream, n_stream),
                   (q.nb[0], q.nb[1], q.nb[2], q.nb[2] * (q.ne[2] // n_stream)))
        q = g.permute(q, 0, 2, 1, 3)
        k = g.permute(k, 0, 2, 1, 3)
        v = g.permute(v, 0, 2, 1, 3)
        if self.flash_attn and kq_b is None:
            if v_trans:
                v = g.transpose(v)
            if k.type == F32:
                k = g.cast(k, F16)
            if v.type == F32:
                v = g.cast(v, F16)
            cur = g.flash_attn(q, k, v, mask, sinks)
            if v_mla is not None:
                cur = g.permute(cur, 0, 2, 1, 3)
                cur = g.mul_mat(v_mla, cur)
                cur = g.permute(cur, 0, 2, 1, 3)
                cur = g.cont(cur)
            cur = g.reshape(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
        else:
            kq = g.mul_mat(k, q)
            if kq_b is not None:
                kq = g.same("ADD", kq, kq_b)
            src = (kq, mask) + ((sinks,) if sinks is not None else ())
            kq = g.new(kq.ne, F32, "SOFT_MAX", src)
            if not v_trans:
                v = g.cont(g.transpose(v))
            kqv = g.mul_mat(v, kq)
            if v_mla is not None:
                kqv = g.mul_mat(v_mla, kqv)
            cur = g.permute(kqv, 0, 2, 1, 3)
            cur = g.cont(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
        g.expand(cur)
        return cur

    def attn(self, inp, il, wo, q_cur, k_cur, v_cur, sinks=None, wo_b=None, iswa=False, mha=None):
        """build_attn over a KV cache (llm_graph_input_attn_kv; iswa: llm_graph_input_attn_kv_iswa,
        which expands K before V, as minimax-m3.cpp's sparse layers do); mha(q, k, v) replaces
        build_attn_mha (minimax-m3.cpp's block-sparse attention)."""
        g = self.g
        if inp["k_rot"] is not None:
            q_cur = self.hadamard(q_cur, inp["k_rot"])
            k_cur = self.hadamard(k_cur, inp["k_rot"])
        if inp["v_rot"] is not None:
            v_cur = self.hadamard(v_cur, inp["v_rot"])
        g.expand(q_cur)
        for t in ((k_cur, v_cur) if iswa else (v_cur, k_cur)):
            g.expand(t)
        k_cache, v_cache = self.cache(inp, il, k_cur.ne[0] * k_cur.ne[1], v_cur.ne[0] * v_cur.ne[1])
        g.expand(self.cpy_k(inp, k_cache, k_cur))
        g.expand(self.cpy_v(inp, v_cache, v_cur))
        k = self.get_k(inp, k_cache, k_cur.ne[0], k_cur.ne[1])
        v = self.get_v(inp, v_cache, v_cur.ne[0], v_cur.ne[1])
        cur = mha(q_cur, k, v) if mha else self.attn_mha(q_cur, k, v, inp["mask"], sinks)
        if inp["v_rot"] is not None:
            cur = self.hadamard(cur, inp["v_rot"])
        if wo is not None:
            cur = g.mul_mat(wo, cur)
        if wo_b is not None:
            cur = g.same("ADD", cur, wo_b)
        return cur

    def attn_k(self, inp, il, wo, q_cur, k_cur, v_cur, v_mla):
        """build_attn over a K-only cache (llm_graph_input_attn_k, MLA): V is a view of K."""
        g = self.g
        g.expand(q_cur)
        g.expand(v_cur)
        g.expand(k_cur)
        k_cache, _v = self.cache(inp, il, k_cur.ne[0] * k_cur.ne[1], 0)
        g.expand(self.cpy_k(inp, k_cache, k_cur))
        k = self.get_k(inp, k_cache, k_cur.ne[0], k_cur.ne[1])
        v = g.view(k, (v_cur.ne[0], k.ne[1], k.ne[2], k.ne[3]), k.nb)
        cur = self.attn_mha(q_cur, k, v, inp["mask"], v_mla=v_mla)
        return g.mul_mat(wo, cur)

    def qkv(self, il, cur, head, n_head, n_head_kv):
        """build_qkv with separate Q, K and V weights, reshaped to heads."""
        g = self.g
        q = self._bias(g.mul_mat(self.w("attn_q", il), cur), "attn_q", il)
        k = self._bias(g.mul_mat(self.w("attn_k", il), cur), "attn_k", il)
        v = self._bias(g.mul_mat(self.w("attn_v", il), cur), "attn_v", il)
        return (g.reshape(q, head, n_head, self.n_tokens), g.reshape(k, head, n_head_kv, self.n_tokens),
                g.reshape(v, head, n_head_kv, self.n_tokens))

    def _bias(self, cur, name, il):
        dims = self.weight_dims("blk.%d.%s.bias" % (il, name))
        if dims is None:
            return cur
        return self.g.same("ADD", cur, self.g.external(dims, F32, self.layer_dev[il]))

    def moe(self, il, cur, n_expert, n_used, gating="softmax", norm_w=True, w_scale=0.0, probs_b=None,
            biases=False):
        """build_moe_ffn (SiLU-gated experts, mul_mat_id, one view per used expert summed)."""
        g = self.g
        n_embd, n_tokens = cur.ne[0], cur.ne[1]
        logits = g.mul_mat(self.w("ffn_gate_inp", il), cur)
        if biases and self.weight_dims("blk.%d.ffn_gate_inp.bias" % il):
            logits = g.same("ADD", logits, g.external(self.weight_dims("blk.%d.ffn_gate_inp.bias" % il), F32,
                                                      self.layer_dev[il]))
        if gating == "softmax":
            probs = g.new(logits.ne, F32, "SOFT_MAX", (logits,))
        elif gating == "sigmoid" or gating == "oai":
            probs = g.new(logits.ne, F32, "UNARY", (logits,))
        else:
            probs = logits
        selection = probs
        if probs_b is not None:
            selection = g.same("ADD", probs, probs_b)
        _sort, selected = g.argsort_top_k(selection, n_used)
        probs = g.reshape(probs, 1, n_expert, n_tokens)
        weights = g.get_rows(probs, selected)
        if gating == "softmax_weight":
            weights = g.reshape(weights, n_used, n_tokens)
            weights = g.new(weights.ne, F32, "SOFT_MAX", (weights,))
            weights = g.reshape(weights, 1, n_used, n_tokens)
        if norm_w:
            weights = g.reshape(weights, n_used, n_tokens)
            total = g.sum_rows(weights)
            total = g.same("CLAMP", total)
            weights = g.same("DIV", weights, total)
            weights = g.reshape(weights, 1, n_used, n_tokens)
        if w_scale not in (0.0, 1.0):
            weights = g.same("SCALE", weights)
        g.expand(weights)
        cur = g.reshape(cur, n_embd, 1, n_tokens)
        up = g.mul_mat_id(self.w("ffn_up_exps", il), cur, selected)
        if biases:
            up = self._add_id(up, "ffn_up_exps.bias", il, selected)
        gate = g.mul_mat_id(self.w("ffn_gate_exps", il), cur, selected)
        if biases:
            gate = self._add_id(gate, "ffn_gate_exps.bias", il, selected)
        cur = g.glu(gate, up)
        experts = g.mul_mat_id(self.w("ffn_down_exps", il), cur, selected)
        if biases:
            experts = self._add_id(experts, "ffn_down_exps.bias", il, selected)
        experts = g.same("MUL", experts, weights)
        g.expand(experts)
        views = []
        for _i in range(n_used):
            view = g.view_nd(experts, (n_embd, n_tokens), (experts.nb[2],))
            views.append(view)
            g.expand(view)
        out = views[0]
        for view in views[1:]:
            out = g.new(out.ne[:2], F32, "ADD", (out, view))
            g.expand(out)
        if n_used == 1:
            out = g.cont(out)
        return out

    def _add_id(self, cur, name, il, ids):
        dims = self.weight_dims("blk.%d.%s" % (il, name))
        if dims is None:
            return cur
        bias = self.g.external(dims, F32, self.layer_dev[il])
        return self.g.new(cur.ne, F32, "ADD_ID", (cur, bias, ids))

    def ffn(self, il, cur, prefix="ffn", suffix=""):
        """build_ffn with a SiLU gate (LLM_FFN_SILU, LLM_FFN_PAR)."""
        g = self.g
        up = g.mul_mat(self.w("%s_up%s" % (prefix, suffix), il), cur)
        gate = g.mul_mat(self.w("%s_gate%s" % (prefix, suffix), il), cur)
        cur = g.glu(gate, up)
        return g.mul_mat(self.w("%s_down%s" % (prefix, suffix), il), cur)

    def output(self, cur):
        g = self.g
        g.dev = self.layer_dev[-1]
        cur = self.norm(cur, self.w("output_norm.weight"))
        cur.output = True
        out = self.w("output.weight") or self.w("token_embd.weight", dev=self.layer_dev[-1])
        logits = g.mul_mat(out, cur)
        logits.output = True
        g.expand(logits)
        return logits


# ---------------------------------------------------------------- the families (src/models/*.cpp)

def _qwen3moe(b):
    """src/models/qwen3moe.cpp; minimax-m2.cpp differs in its norms (over all heads, before the
    reshape) and its sigmoid gating with a bias."""
    hp = b.hp
    g = b.g
    minimax = hp["arch"] == "minimax-m2"
    inpL = b.inp_embd()
    inp_pos = b.inp_pos()
    inp = b.attn_inp(hp["kv_size"], hp["n_stream"], hp["n_embd_v_gqa_max"])
    out_ids = b.inp_out_ids()
    n_layer = hp["n_layer"]
    for il in b.layers():
        b.at(il)
        inpSA = inpL
        cur = b.norm(inpL, b.w("attn_norm", il))
        head, n_head, n_head_kv = hp["head_k"], hp["n_head"][il], hp["n_head_kv"][il]
        if minimax:
            q = g.mul_mat(b.w("attn_q", il), cur)
            k = g.mul_mat(b.w("attn_k", il), cur)
            v = g.mul_mat(b.w("attn_v", il), cur)
            q = b.norm(q, b.w("attn_q_norm", il))
            k = b.norm(k, b.w("attn_k_norm", il))
            q = g.reshape(q, head, n_head, b.n_tokens)
            k = g.reshape(k, head, n_head_kv, b.n_tokens)
            v = g.reshape(v, head, n_head_kv, b.n_tokens)
        else:
            q, k, v = b.qkv(il, cur, head, n_head, n_head_kv)
            q = b.norm(q, b.w("attn_q_norm", il))
        q = g.new(q.ne, F32, "ROPE", (q, inp_pos))
        if not minimax:
            k = b.norm(k, b.w("attn_k_norm", il))
        k = g.new(k.ne, F32, "ROPE", (k, inp_pos))
        cur = b.attn(inp, il, b.w("attn_output", il), q, k, v)
        if il == n_layer - 1:
            cur, inpSA = g.get_rows(cur, out_ids), g.get_rows(inpSA, out_ids)
        ffn_inp = g.same("ADD", cur, inpSA)
        cur = b.norm(ffn_inp, b.w("ffn_norm", il))
        if minimax:
            cur = b.moe(il, cur, hp["n_expert"], hp["n_expert_used"], gating="sigmoid", probs_b=_probs_b(b, il))
        else:
            cur = b.moe(il, cur, hp["n_expert"], hp["n_expert_used"])
        cur = g.same("ADD", cur, ffn_inp)
        inpL = cur
    return b.output(inpL)


_GATING = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}


def _probs_b(b, il):
    """The layer's expert-selection bias (exp_probs_b), an input of the graph where the GGUF has one."""
    dims = b.weight_dims("blk.%d.exp_probs_b.bias" % il)
    return b.g.external(dims, F32, b.layer_dev[il]) if dims else None


def _routed(b, il, cur, default_gating="softmax", default_norm=False):
    """build_moe_ffn with the gating, weight norm and scale the GGUF gives (load_arch_hparams)."""
    hp = b.hp
    meta = hp["meta"]
    return b.moe(il, cur, hp["n_expert"], hp["n_expert_used"],
                 gating=_GATING.get(meta("expert_gating_func", 0), default_gating),
                 norm_w=bool(meta("expert_weights_norm", default_norm)),
                 w_scale=float(meta("expert_weights_scale", 0.0) or 0.0), probs_b=_probs_b(b, il))


def _shared_ffn(b, il, cur, routed):
    return b.g.same("ADD", routed, b.ffn(il, cur, suffix="_shexp"))


def _glm4moe(b, attend=None):
    """src/models/glm4-moe.cpp: Q/K norms per head, dense leading layers, a shared expert;
    attend(inp, inp_pos, il, cur, q, k, v) builds the attention of minimax-m3.cpp, whose layers are
    otherwise these (its FFN norm is ffn_norm)."""
    hp = b.hp
    g = b.g
    inpL = b.inp_embd()
    inp_pos = b.inp_pos()
    inp = b.attn_inp(hp["kv_size"], hp["n_stream"], hp["n_embd_v_gqa_max"])
    out_ids = b.inp_out_ids()
    n_layer = hp["n_layer"]
    for il in b.layers():
        b.at(il)
        inpSA = inpL
        cur = b.norm(inpL, b.w("attn_norm", il))
        q, k, v = b.qkv(il, cur, hp["head_k"], hp["n_head"][il], hp["n_head_kv"][il])
        if b.weight_dims("blk.%d.attn_q_norm.weight" % il):
            q = b.norm(q, b.w("attn_q_norm", il))
        if b.weight_dims("blk.%d.attn_k_norm.weight" % il):
            k = b.norm(k, b.w("attn_k_norm", il))
        q = g.new(q.ne, F32, "ROPE", (q, inp_pos))
        k = g.new(k.ne, F32, "ROPE", (k, inp_pos))
        cur = attend(inp, inp_pos, il, cur, q, k, v) if attend else b.attn(inp, il, b.w("attn_output", il), q, k, v)
        if il == n_layer - 1:
            cur, inpSA = g.get_rows(cur, out_ids), g.get_rows(inpSA, out_ids)
        ffn_inp = g.same("ADD", cur, inpSA)
        cur = b.norm(ffn_inp, b.w("post_attention_norm", il) or b.w("ffn_norm", il))
        if il < hp["meta"]("leading_dense_block_count", 0):
            cur = b.ffn(il, cur)
        else:
            cur = _shared_ffn(b, il, cur, _routed(b, il, cur, "sigmoid"))
        inpL = g.same("ADD", cur, ffn_inp)
    return b.output(inpL)


# src/llama-kv-cache-msa.cpp llama_kv_cache_msa_context::get_n_pos: the positions in the cache
# padded to max(n_pad, 256); sched_reserve builds its graphs over an empty cache, so the buffer it
# reports (and this one) holds the indexer's scores of 256 positions, which grow with the context
MSA_RESERVE_POSITIONS = 256


def _minimax_m3(b):
    """src/models/minimax-m3.cpp: the layers of glm4-moe.cpp with MSA (MiniMax Sparse Attention) in
    every layer from leading_dense_block_count on, when flash attention is on and each sequence
    has a stream of its own (else all layers attend densely): an indexer picks the top-k blocks of
    positions per KV head, and flash attention runs over them (a mask over all cells per stream
    for a batch, the gathered blocks when each stream decodes one token)."""
    hp = b.hp
    g = b.g
    meta = hp["meta"]
    blk, top = meta("attention.indexer.block_size"), meta("attention.indexer.top_k")
    idx_dim, n_idx = meta("attention.indexer.key_length"), meta("attention.indexer.head_count")
    n_kv, ns, n_ps = hp["kv_size"], hp["n_stream"], -(-MSA_RESERVE_POSITIONS // blk) * blk
    nblk, decode = n_ps // blk, b.n_tokens == ns
    top = min(top, nblk)
    if not (b.flash_attn and (b.n_seqs == 1 or ns > 1)):
        return _glm4moe(b)
    # each sparse layer's own views of the MSA inputs and of the F32 mask are split inputs of their
    # own (copied to the layer's device, kept for the whole graph under pipeline parallelism): a
    # device's buffer grows with every sparse layer it holds, so every layer is built
    b.hp = dict(hp, built=None)
    # the hoisted MSA inputs (llm_graph_input_msa) and the indexer cache's own row indices
    # (slot: pos_slot_f at decode, cell_blk for a batch)
    msa = {"bias": g.inp((nblk, b.n_tokens), F32, "msa_bias"), "pos_mask": g.inp((n_ps, b.n_tokens), F32, "msa_pos_mask"),
           "pos_slot_i": g.inp((n_ps, ns), I32, "msa_pos_slot_i"), "k_idxs": g.inp((b.n_tokens,), I64, "k_idxs_idx"),
           "slot": g.inp((n_ps, ns), F32, "msa_pos_slot_f") if decode else g.inp((n_kv, ns), I32, "msa_cell_blk")}

    def attend(inp, inp_pos, il, cur, q, k, v):
        if il < meta("leading_dense_block_count", 0):
            return b.attn(inp, il, b.w("attn_output", il), q, k, v)
        if "mf" not in msa:
            msa["mf"] = g.cast(inp["mask"], F32)  # placed at its first use, as the scheduler does
        iq = g.reshape(g.mul_mat(b.w("indexer.q_proj", il), cur), idx_dim, n_idx, b.n_tokens)
        ik = g.reshape(g.mul_mat(b.w("indexer.k_proj", il), cur), idx_dim, 1, b.n_tokens)
        iq = g.new(iq.ne, F32, "ROPE", (b.norm(iq, b.w("indexer.q_norm", il)), inp_pos))
        ik = g.new(ik.ne, F32, "ROPE", (b.norm(ik, b.w("indexer.k_norm", il)), inp_pos))
        idx_inp = dict(inp, k_idxs=msa["k_idxs"])
        ik_cache, _v = b.cache(idx_inp, il, idx_dim, 0)
        g.expand(b.cpy_k(idx_inp, ik_cache, ik))
        ik_kv = b.get_k(idx_inp, ik_cache, idx_dim, 1)
        return b.attn(inp, il, b.w("attn_output", il), q, k, v, iswa=True,
                      mha=lambda q, k, v: (_msa_decode if decode else _msa_batch)(b, msa, iq, ik_kv, q, k, v, blk, top))
    return _glm4moe(b, attend)


def _msa_fa(b, q, k, v, mask, groups):
    """build_attn_msa_fa: the query heads of each KV head (and stream) on flash attention's 4th dim."""
    g = b.g
    d, hq, t, c = q.ne[0], q.ne[1], q.ne[2], k.ne[3]
    rows = hq * t // (groups * c)
    o = g.flash_attn(g.permute(g.reshape(q, d, groups, c, rows), 0, 2, 3, 1), k, v, mask)
    # the permuted output is contiguous (ggml_is_contiguous) unless both swapped dims exceed 1
    o = g.permute(o, 0, 1, 3, 2)
    return g.reshape(g.cont(o) if rows > 1 and c > 1 else o, d * hq, t)


def _msa_scores(b, sc, pos_mask, bias, blk, top):
    """The indexer's block scores: -inf where no position is mapped, max-pooled over each block,
    the local blocks forced in, and the top-k blocks."""
    g = b.g
    sc = g.inplace("ADD", sc, pos_mask)
    bs = g.new((sc.ne[0] // blk,) + sc.ne[1:], F32, "POOL_2D", (sc,))
    bsf = g.same("ADD", bs, bias)
    return g.new((top,) + bsf.ne[1:], I32, "TOP_K", (bsf,))


def _msa_batch(b, msa, iq, ik_kv, q_cur, k, v, blk, top):
    """The batch branch of minimax-m3.cpp's sparse layer: per stream, the chosen blocks become a
    mask over the stream's cells for one flash attention over all its KV heads."""
    g = b.g
    d, n_head, hkv, n_kv, ns = k.ne[0], q_cur.ne[1], k.ne[1], k.ne[2], k.ne[3]
    idx_dim, n_idx = iq.ne[0], iq.ne[1]
    n_tps = b.n_tokens // ns
    n_ps, nblk = msa["pos_mask"].ne[0], msa["bias"].ne[0]
    outs = []
    for _st in range(ns):
        iq_s = g.view_nd(iq, (idx_dim, n_idx, n_tps), iq.nb[1:3])
        ik_s = g.view_nd(ik_kv, (idx_dim, n_kv), (ik_kv.nb[2],))
        psl_s = g.view_nd(msa["pos_slot_i"], (n_ps,), ())
        pm_s = g.view_nd(msa["pos_mask"], (n_ps, 1, n_tps), (msa["pos_mask"].nb[1], msa["pos_mask"].nb[1]))
        cb_s = g.view_nd(msa["slot"], (n_kv,), ())
        mf_s = g.view_nd(msa["mf"], (n_kv, n_tps, 1), (msa["mf"].nb[1], msa["mf"].nb[3]))
        bias_s = g.view_nd(msa["bias"], (nblk, 1, n_tps), (msa["bias"].nb[1], msa["bias"].nb[1]))
        q_s = g.view_nd(q_cur, (d, n_head, n_tps), q_cur.nb[1:3])
        k_s = g.view_nd(k, (d, hkv, n_kv, 1), k.nb[1:4])
        v_s = g.view_nd(v, (d, hkv, n_kv, 1), v.nb[1:4])
        ikp = g.get_rows(ik_s, psl_s)
        sc = g.reshape(g.mul_mat(ikp, g.reshape(iq_s, idx_dim, n_idx * n_tps)), n_ps, n_idx, n_tps)
        idx = _msa_scores(b, sc, pm_s, bias_s, blk, top)
        ninf = g.cast(g.new(bias_s.ne, F32, "SCALE", (bias_s,)), F16)
        ninf = g.new((nblk, n_idx, n_tps), F16, "REPEAT", (ninf,))
        zero = g.same("SCALE", g.cast(idx, F32))
        bm = g.set_rows(g.reshape(ninf, 1, nblk, n_idx * n_tps), g.reshape(zero, 1, top, n_idx * n_tps),
                        g.reshape(idx, top, n_idx * n_tps))
        bm = g.cont(g.permute(g.reshape(bm, nblk, n_idx, n_tps), 0, 2, 1, 3))
        bm2 = g.cont(g.transpose(g.reshape(bm, nblk, n_tps * n_idx)))
        bmx = g.reshape(g.cont(g.transpose(g.get_rows(bm2, cb_s))), n_kv, n_tps, n_idx)
        mask4 = g.cast(g.reshape(g.inplace("ADD", bmx, mf_s), n_kv, n_tps, 1, n_idx), F16)
        outs.append(_msa_fa(b, q_s, g.permute(k_s, 0, 3, 1, 2), g.permute(v_s, 0, 3, 1, 2), mask4, n_head // hkv))
    cur = outs[0]
    for out in outs[1:]:
        cur = g.new((cur.ne[0], cur.ne[1] + out.ne[1]), F32, "CONCAT", (cur, out))
    return cur


def _msa_decode(b, msa, iq, ik_kv, q_cur, k, v, blk, top):
    """The decode branch (one token per stream): the chosen blocks' K and V rows gathered through
    the position -> cell map, one flash attention over every stream and KV head."""
    g = b.g
    d, hkv, n_kv, ns = k.ne[0], k.ne[1], k.ne[2], k.ne[3]
    idx_dim, n_idx = iq.ne[0], iq.ne[1]
    n_ps = msa["pos_mask"].ne[0]
    nblk = n_ps // blk
    ikp = g.get_rows(g.view_nd(ik_kv, (idx_dim, n_kv, ns), ik_kv.nb[2:4]), msa["pos_slot_i"])
    sc = g.mul_mat(g.reshape(ikp, idx_dim, n_ps, 1, ns), g.reshape(iq, idx_dim, n_idx, 1, ns))
    idx = _msa_scores(b, sc, g.reshape(msa["pos_mask"], n_ps, 1, 1, ns), g.reshape(msa["bias"], nblk, 1, 1, ns), blk, top)
    a = g.reshape(g.same("SCALE", g.cast(idx, F32)), 1, top, n_idx, ns)
    rows = blk * top * n_idx
    tj = g.same("ADD", g.new((blk, top, n_idx, ns), F32, "REPEAT", (a,)),
                g.reshape(g.new((blk,), F32, "ARANGE"), blk, 1, 1))
    tokj = g.cast(g.reshape(tj, rows, ns), I32)
    cs = g.reshape(g.get_rows(g.reshape(msa["slot"], 1, n_ps, ns), tokj), blk, top, n_idx, ns)
    tr = g.same("ADD", g.same("SCALE", cs), g.reshape(g.new((hkv,), F32, "ARANGE"), 1, 1, n_idx))
    tokr = g.cast(g.reshape(tr, rows, ns), I32)
    gathered = []
    for cache in (k, v):
        rows_kv = g.get_rows(g.view_nd(cache, (d, hkv * n_kv, ns), (cache.nb[1], cache.nb[3])), tokr)
        rows_kv = g.reshape(rows_kv, d, blk * top, 1, n_idx * ns)
        gathered.append(rows_kv if cache.type == F32 else g.cast(rows_kv, F16))
    mg = g.get_rows(g.reshape(msa["pos_mask"], 1, n_ps, ns), tokj)
    mfa = g.cast(g.reshape(mg, blk * top, 1, 1, n_idx * ns), F16)
    return _msa_fa(b, q_cur, gathered[0], gathered[1], mfa, q_cur.ne[1] // hkv)


def _deepseek2(b):
    """src/models/deepseek2.cpp with MLA (the absorbed wk_b / wv_b of GGUFs converted for it):
    a K-only cache of kv_lora_rank + rope values per token."""
    hp = b.hp
    g = b.g
    meta = hp["meta"]
    lora = meta("attention.kv_lora_rank")
    rope = hp["n_rot"]
    head_k = meta("attention.key_length_mla", 0) or hp["head_k"]
    nope = head_k - rope
    n_tokens = b.n_tokens
    inpL = b.inp_embd()
    inp_pos = b.inp_pos()
    inp = b.attn_inp(hp["kv_size"], hp["n_stream"], 0, v_idxs=False)
    out_ids = b.inp_out_ids()
    n_layer = hp["n_layer"]
    for il in b.layers():
        b.at(il)
        n_head = hp["n_head"][il]
        inpSA = inpL
        cur = b.norm(inpL, b.w("attn_norm", il))
        if b.weight_dims("blk.%d.attn_q_a.weight" % il):
            q = g.mul_mat(b.w("attn_q_a", il), cur)
            q = b.norm(q, b.w("attn_q_a_norm", il))
            q = g.mul_mat(b.w("attn_q_b", il), q)
        else:
            q = g.mul_mat(b.w("attn_q", il), cur)
        q = g.reshape(q, head_k, n_head, n_tokens)
        kv_pe = g.mul_mat(b.w("attn_kv_a_mqa", il), cur)
        kv_cmpr = g.view_nd(kv_pe, (lora, n_tokens), (row_bytes(F32, lora + rope),))
        k_pe = g.view_nd(kv_pe, (rope, 1, n_tokens), (row_bytes(F32, lora + rope), row_bytes(F32, lora + rope)))
        k_pe = g.new(k_pe.ne, F32, "ROPE", (k_pe, inp_pos))
        kv_cmpr = b.norm(kv_cmpr, b.w("attn_kv_a_norm", il))
        q_nope = g.view_nd(q, (nope, n_head, n_tokens), (q.nb[1], q.nb[2]))
        q_pe = g.view_nd(q, (rope, n_head, n_tokens), (q.nb[1], q.nb[2]))
        q_pe = g.new(q_pe.ne, F32, "ROPE", (q_pe, inp_pos))
        q_nope = g.permute(q_nope, 0, 2, 1, 3)
        absorbed = g.mul_mat(b.w("attn_k_b", il), q_nope)
        absorbed = g.permute(absorbed, 0, 2, 1, 3)
        q_cur = g.new((absorbed.ne[0] + q_pe.ne[0],) + absorbed.ne[1:], F32, "CONCAT", (absorbed, q_pe))
        kv_cmpr = g.reshape(kv_cmpr, lora, 1, n_tokens)
        k_cur = g.new((lora + rope, 1, n_tokens), F32, "CONCAT", (kv_cmpr, k_pe))
        cur = b.attn_k(inp, il, b.w("attn_output", il), q_cur, k_cur, kv_cmpr, b.w("attn_v_b", il))
        if il == n_layer - 1:
            cur, inpSA = g.get_rows(cur, out_ids), g.get_rows(inpSA, out_ids)
        ffn_inp = g.same("ADD", cur, inpSA)
        cur = b.norm(ffn_inp, b.w("ffn_norm", il))
        if il < meta("leading_dense_block_count", 0):
            cur = b.ffn(il, cur)
        else:
            cur = _shared_ffn(b, il, cur, _routed(b, il, cur, "softmax"))
        inpL = g.same("ADD", cur, ffn_inp)
    return b.output(inpL)


def _gpt_oss(b):
    """src/models/openai-moe.cpp: sliding-window layers in a cache of their own (llama_kv_cache_iswa),
    attention sinks, biased experts and router."""
    hp = b.hp
    g = b.g
    inpL = b.inp_embd()
    inp_pos = b.inp_pos()
    full = b.attn_inp(hp["kv_size"], hp["n_stream"], hp["n_embd_v_gqa_max"])
    swa = b.attn_inp(hp["swa_size"], hp["n_stream"], hp["n_embd_v_gqa_max"])
    out_ids = b.inp_out_ids()
    for il in b.layers():
        b.at(il)
        inpSA = inpL
        cur = b.norm(inpL, b.w("attn_norm", il))
        q, k, v = b.qkv(il, cur, hp["head_k"], hp["n_head"][il], hp["n_head_kv"][il])
        q = g.new(q.ne, F32, "ROPE", (q, inp_pos))
        k = g.new(k.ne, F32, "ROPE", (k, inp_pos))
        sinks = b.weight_dims("blk.%d.attn_sinks.weight" % il)
        sinks = g.external(sinks, F32, b.layer_dev[il]) if sinks else None
        wo_b = b.weight_dims("blk.%d.attn_output.bias" % il)
        wo_b = g.external(wo_b, F32, b.layer_dev[il]) if wo_b else None
        cur = b.attn(swa if il in hp["swa_layers"] else full, il, b.w("attn_output", il), q, k, v, sinks, wo_b,
                     iswa=True)
        ffn_inp = g.same("ADD", cur, inpSA)
        cur = b.norm(ffn_inp, b.w("post_attention_norm", il))
        cur = b.moe(il, cur, hp["n_expert"], hp["n_expert_used"], gating="softmax_weight", norm_w=False,
                    w_scale=float(hp["meta"]("expert_weights_scale", 0.0) or 0.0), biases=True)
        inpL = g.same("ADD", cur, ffn_inp)
    b.g.dev = b.layer_dev[-1]
    return b.output(g.get_rows(inpL, out_ids))


def _rs(b, inp, states_all, state_size):
    """build_rs: the sequences' states gathered by rs_s_copy (the zeroed and extra states are
    written in place into the cache)."""
    g = b.g
    states = g.reshape(states_all, state_size, states_all.ne[1])
    g.expand(g.view(states, (state_size, 1, 1, 1), states.nb, "SCALE"))
    out = g.get_rows(states, inp["s_copy_main"])
    g.expand(out)
    g.expand(g.write(g.get_rows(states, inp["s_copy_extra"]), states_all))
    return out


def _qwen3next_linear(b, inp, cur, il):
    """qwen3next.cpp build_layer_attn_linear with the fused gated delta net (cparams.fused_gdn_*)."""
    hp = b.hp
    g = b.g
    meta = hp["meta"]
    d_inner, head_k, n_k = meta("ssm.inner_size"), meta("ssm.state_size"), meta("ssm.group_count")
    n_v = meta("ssm.time_step_rank")
    head_v = d_inner // n_v
    n_seqs = b.n_seqs
    nst = b.n_tokens // n_seqs
    n_embd = cur.ne[0]
    if b.weight_dims("blk.%d.attn_qkv.weight" % il):
        qkv = g.mul_mat(b.w("attn_qkv", il), cur)
        qkv = g.reshape(qkv, qkv.ne[0], nst, n_seqs)
        z = g.mul_mat(b.w("attn_gate", il), cur)
    else:
        mixed = g.mul_mat(b.w("ssm_in", il), cur)
        width = 2 * head_k + 2 * head_v * (n_v // n_k)
        mixed = g.reshape(mixed, width, n_k, nst, n_seqs)
        parts = []
        for size in (head_k, head_k, head_v * n_v // n_k, head_v * n_v // n_k):
            parts.append(g.view_nd(mixed, (size, n_k, nst, n_seqs), mixed.nb[1:]))
        z = g.cont(parts[3])
        q_flat = g.cont(parts[0], head_k * n_k, nst, n_seqs)
        k_flat = g.cont(parts[1], head_k * n_k, nst, n_seqs)
        v_flat = g.cont(parts[2], head_v * n_v, nst, n_seqs)
        qkv = g.new((q_flat.ne[0] + k_flat.ne[0], nst, n_seqs), F32, "CONCAT", (q_flat, k_flat))
        qkv = g.new((qkv.ne[0] + v_flat.ne[0], nst, n_seqs), F32, "CONCAT", (qkv, v_flat))
    ba = g.mul_mat(b.w("ssm_ba", il), cur)
    ba = g.reshape(ba, 2 * n_v // n_k, n_k, nst, n_seqs)
    beta = g.view_nd(ba, (n_v // n_k, n_k, nst, n_seqs), ba.nb[1:])
    alpha = g.view_nd(ba, (n_v // n_k, n_k, nst, n_seqs), ba.nb[1:])
    beta = g.new(beta.ne, F32, "UNARY", (g.cont(beta),))
    alpha = g.cont(alpha, n_v, nst, n_seqs)
    alpha = g.same("ADD", alpha, g.external(b.weight_dims("blk.%d.ssm_dt.bias" % il), F32, b.layer_dev[il]))
    alpha = g.same("UNARY", alpha)
    gate = g.same("MUL", alpha, g.external(b.weight_dims("blk.%d.ssm_a" % il), F32, b.layer_dev[il]))
    beta = g.reshape(beta, 1, n_v, nst, n_seqs)
    gate = g.reshape(gate, 1, n_v, nst, n_seqs)
    kernel = b.weight_dims("blk.%d.ssm_conv1d.weight" % il)
    d_conv = kernel[0]
    channels = d_inner + 2 * n_k * head_k
    dev = b.layer_dev[il]
    r_all = g.external((hp["n_embd_r"], hp["rs_size"]), F32, dev, "r_l%d" % il)
    s_all = g.external((hp["n_embd_s"], hp["rs_size"]), F32, dev, "s_l%d" % il)
    # build_conv_state
    conv_states = _rs(b, inp, r_all, hp["n_embd_r"])
    conv_states = g.reshape(conv_states, d_conv - 1, channels, n_seqs)
    qkv_t = g.transpose(qkv)
    conv_input = g.new((conv_states.ne[0] + qkv_t.ne[0], channels, n_seqs), F32, "CONCAT", (conv_states, qkv_t))
    last = g.view_nd(conv_input, (d_conv - 1, channels, n_seqs), conv_input.nb[1:3])
    g.expand(g.write(last, r_all))
    state = _rs(b, inp, s_all, hp["n_embd_s"])
    state = g.reshape(state, head_v, head_v, n_v, n_seqs)
    conv = g.new((channels, nst, n_seqs), F32, "SSM_CONV", (conv_input, g.external(kernel, F32, dev)))
    conv = g.same("UNARY", conv)
    row = row_bytes(F32, head_k * n_k * 2 + head_v * n_v)
    q_conv = g.view_nd(conv, (head_k, n_k, nst, n_seqs), (head_k * 4, row, row * nst))
    k_conv = g.view_nd(conv, (head_k, n_k, nst, n_seqs), (head_k * 4, row, row * nst))
    v_conv = g.view_nd(conv, (head_v, n_v, nst, n_seqs), (head_v * 4, row, row * nst))
    q_conv = g.same("SCALE", g.new(q_conv.ne, F32, "RMS_NORM", (q_conv,)))
    k_conv = g.same("SCALE", g.new(k_conv.ne, F32, "RMS_NORM", (k_conv,)))
    if n_k != n_v:
        rep = n_v // n_k
        q_conv = g.reshape(g.new((head_k, rep, n_k, nst * n_seqs), F32, "REPEAT",
                                 (g.reshape(q_conv, head_k, 1, n_k, nst * n_seqs),)), head_k, n_k * rep, nst, n_seqs)
        k_conv = g.reshape(g.new((head_k, rep, n_k, nst * n_seqs), F32, "REPEAT",
                                 (g.reshape(k_conv, head_k, 1, n_k, nst * n_seqs),)), head_k, n_k * rep, nst, n_seqs)
    S_v, H = v_conv.ne[0], v_conv.ne[1]
    result = g.new((S_v * H, nst * n_seqs + S_v * n_seqs), F32, "GATED_DELTA_NET",
                   (q_conv, k_conv, v_conv, gate, beta, state))
    output = g.view_nd(result, (S_v, H, nst, n_seqs), (S_v * 4, S_v * H * 4, S_v * H * nst * 4))
    new_state = g.view_nd(result, (S_v, S_v, H, n_seqs), (S_v * 4, S_v * S_v * 4, S_v * S_v * H * 4))
    g.expand(g.write(new_state, s_all))
    z = g.reshape(z, head_v, n_v, nst, n_seqs)
    normalized = b.norm(output, b.w("ssm_norm", il))
    cur = g.same("MUL", normalized, g.new(z.ne, F32, "UNARY", (z,)))
    cur = g.reshape(cur, head_v * n_v, nst, n_seqs)
    cur = g.mul_mat(b.w("ssm_out", il), cur)
    return g.reshape(cur, n_embd, nst * n_seqs)


def _qwen3next(b):
    """src/models/qwen3next.cpp: gated delta-net layers with a recurrent state (llama_memory_hybrid)
    beside gated full-attention layers; routed experts plus a gated shared expert."""
    hp = b.hp
    g = b.g
    n_tokens = b.n_tokens
    inpL = b.inp_embd()
    s_copy = g.inp((hp["rs_size"],), I32, "rs_s_copy")
    rs = {"s_copy_main": g.view_nd(s_copy, (b.n_seqs,), ()),
          "s_copy_extra": g.view_nd(s_copy, (hp["rs_size"] - b.n_seqs,), ())}
    attn = b.attn_inp(hp["kv_size"], hp["n_stream"], hp["n_embd_v_gqa_max"])
    inp_pos = b.inp_pos()
    out_ids = b.inp_out_ids()
    for il in b.layers():
        b.at(il)
        inpSA = inpL
        cur = b.norm(inpL, b.w("attn_norm", il))
        g.expand(cur)
        if il in hp["recurrent_layers"]:
            cur = _qwen3next_linear(b, rs, cur, il)
        else:
            head, n_head, n_head_kv = hp["head_k"], hp["n_head"][il], hp["n_head_kv"][il]
            q = g.mul_mat(b.w("attn_q", il), cur)
            k = g.mul_mat(b.w("attn_k", il), cur)
            v = g.mul_mat(b.w("attn_v", il), cur)
            q_full = g.reshape(q, head * 2, n_head, n_tokens, 1)
            q = g.view_nd(q_full, (head, n_head, n_tokens, 1), q_full.nb[1:])
            gate = g.view_nd(q_full, (head, n_head, n_tokens, 1), q_full.nb[1:])
            k = g.reshape(k, head, n_head_kv, n_tokens)
            v = g.reshape(v, head, n_head_kv, n_tokens)
            q = b.norm(g.new(q.ne, F32, "RMS_NORM", (q,)), None)
            q = g.same("MUL", q, b.w("attn_q_norm", il))
            k = b.norm(k, b.w("attn_k_norm", il))
            q = g.new(q.ne, F32, "ROPE", (q, inp_pos))
            k = g.new(k.ne, F32, "ROPE", (k, inp_pos))
            cur = b.attn(attn, il, None, q, k, v)
            gate = g.same("UNARY", g.cont(gate, head * n_head, n_tokens))
            cur = g.same("MUL", cur, gate)
            cur = g.mul_mat(b.w("attn_output", il), cur)
        cur = g.same("ADD", cur, inpSA)
        residual = cur
        cur = b.norm(cur, b.w("post_attention_norm", il))
        moe = b.moe(il, cur, hp["n_expert"], hp["n_expert_used"], norm_w=True,
                    w_scale=float(hp["meta"]("expert_weights_scale", 0.0) or 0.0))
        if b.weight_dims("blk.%d.ffn_up_shexp.weight" % il):
            shexp = b.ffn(il, cur, suffix="_shexp")
            shared_gate = g.same("UNARY", g.mul_mat(b.w("ffn_gate_inp_shexp", il), cur))
            moe = g.same("ADD", moe, g.same("MUL", shexp, shared_gate))
        inpL = g.same("ADD", moe, residual)
    b.g.dev = b.layer_dev[-1]
    cur = b.norm(inpL, b.w("output_norm.weight"))
    cur.output = True
    cur = g.get_rows(cur, out_ids)
    cur.output = True
    logits = g.mul_mat(b.w("output.weight"), cur)
    logits.output = True
    g.expand(logits)
    return logits


FAMILIES = {"qwen3next": _qwen3next, "gpt-oss": _gpt_oss, "qwen3moe": _qwen3moe, "minimax-m2": _qwen3moe, "glm4moe": _glm4moe, "deepseek2": _deepseek2,
            "minimax-m3": _minimax_m3}


def family_hparams(arch, meta, structure, kv_size, n_stream, swa_size, n_seq):
    """The hparams the graph builders read, from the GGUF metadata (meta(key, default) reads
    `<arch>.<key>`) and model_family.gguf_structure; None for a family not built here."""
    if arch not in FAMILIES or not structure or not structure.get("modelled"):
        return None
    n_layer = len(structure["layer_kinds"]) - structure.get("mtp_layers", 0)
    n_all = len(structure["layer_kinds"])

    def per_layer(value):
        return list(value) if isinstance(value, list) else [value] * n_all

    n_head = per_layer(meta("attention.head_count", 1))
    n_head_kv = per_layer(meta("attention.head_count_kv", n_head))
    n_embd = meta("embedding_length", 0)
    head_k = meta("attention.key_length", n_embd // max(n_head + [1]))
    head_v = meta("attention.value_length", head_k)
    kinds = structure["layer_kinds"]
    return {"n_layer": n_layer, "n_head": n_head, "n_head_kv": n_head_kv, "head_k": head_k, "head_v": head_v,
            "n_expert": meta("expert_count", 0), "n_expert_used": meta("expert_used_count", 0),
            "n_rot": meta("rope.dimension_count", head_k), "kv_size": kv_size, "n_stream": n_stream,
            "n_embd_v_gqa_max": max(head_v * n for n in n_head_kv), "meta": meta,
            "swa_layers": set(il for il, kind in enumerate(kinds) if kind == "swa"), "swa_size": swa_size,
            "recurrent_layers": set(il for il, kind in enumerate(kinds) if kind == "recurrent"),
            "rs_size": max(1, n_seq), "n_embd_r": structure.get("state_r_values", 0),
            "n_embd_s": structure.get("state_s_values", 0)}


def representative_layers(layer_dev, kinds):
    """The layers whose graph gives every device the compute buffer of its whole range: within
    each device's run of layers the first three and the first three after every change of layer
    kind (kinds[il]: anything that changes a layer's tensors), so every graph input exists too.
    Later layers of a run repeat the third one's peak: a layer's tensors are freed before the
    next layer's, and only the layer before it matters (its output, or the split's input copy
    for a device's first layer)."""
    chosen = set()
    run = 0
    for il, dev in enumerate(layer_dev[:-1]):
        run = 0 if il == 0 or dev != layer_dev[il - 1] or kinds[il] != kinds[il - 1] else run + 1
        if run < 3:
            chosen.add(il)
    return chosen


def device_buffers(arch, hp, weight, layer_dev, n_ctx, n_seqs, n_ubatch, flash_attn, type_k=F16, type_v=F16,
                   n_copies=1):
    """{device: bytes} of the compute buffers sched_reserve reserves: the larger of the prompt
    graph (min(n_ctx, n_ubatch) tokens, rounded up to a multiple of n_seqs, one output per
    sequence) and the token-generation graph (one token per sequence). CPU (-1) is the host's
    buffer; layer_dev[il] the device of layer il, layer_dev[-1] that of the output."""
    build = FAMILIES[arch]
    n_tokens = min(n_ctx, n_ubatch)
    n_tokens = -(-n_tokens // n_seqs) * n_seqs
    hp = dict(hp, arch=arch)
    sizes = {}
    for tokens, outputs in ((n_tokens, min(n_tokens, n_seqs)), (n_seqs, n_seqs)):
        b = Builder(hp, weight, layer_dev, tokens, n_seqs, outputs, flash_attn, type_k, type_v)
        build(b)
        for dev, size in allocate(*schedule(b.g, n_copies)).items():
            sizes[dev] = max(sizes.get(dev, 0), size)
    return sizes
