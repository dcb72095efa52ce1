"""Plausible wrong answers (each must lose its question's points) and correct answers in other styles.

MUTATIONS[set]: (answer cell, the test cell(s) that must fail, wrong source), or (answer cell, tests,
old, new) for the reference answer with ``old`` replaced by ``new``. No other test may fail.
STYLES[set]: (answer cell, correct source in another style), or (answer cell, old, new) applied to the
reference answer, each keeping full marks.
"""

_KV = "def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):\n    return {}\n"
_BN = "def blocks_needed(num_tokens, block_size):\n    return {}\n"
_RS = ("def reserved_and_slack(lengths, block_size):\n"
       "    reserved = block_size * sum({} for t in lengths)\n    return {}\n")
_LEDGER = ("def shared_prefix_ledger(prefix, tails, block_size):\n"
           "    up = lambda t: -(-t // block_size)\n"
           "    logical = sum(prefix + t for t in tails)\n"
           "    unique = {unique}\n"
           "    reserved = block_size * ({blocks})\n"
           "    return {{'logical': logical, 'unique': unique, 'reserved': reserved, 'slack': reserved - unique}}\n")
_Q5 = ("usable = int(V.q5_utilization * V.q5_gpu_gib * GiB)\nweights = int(V.q5_params * 2)\nS = V.q5_block_size\n"
       "gpu_blocks = {}\n")
_KV5 = "kv_bytes_per_token(*V.q5_shape, 2)"
_Q6 = "S, n = V.q6_block_size, V.q6_requests\nexpected_slack_slots = {}\n"
_Q7 = "fp8_tokens = {}\n"
_GIB7 = "V.q7_gib * GiB"

PS2 = [
    ("q1_answer", "q1_tests", _KV.format("num_layers * num_kv_heads * head_dim * bytes_per_scalar")),  # no x2
    ("q1_answer", "q1_tests", _KV.format("16 * num_layers * num_kv_heads * head_dim * bytes_per_scalar")),  # bits
    ("q2_answer", "q2_tests", _BN.format("num_tokens // block_size")),  # floor
    ("q2_answer", "q2_tests", _BN.format("num_tokens // block_size + 1")),  # off by one at boundaries
    ("q2_answer", "q2_tests", "import math\n" + _BN.format("math.ceil(num_tokens / block_size)")),  # floats
    ("q2_answer", "q2_tests", _BN.format("num_tokens // 0")),  # the learner's code raises: one line, not a traceback
    ("q3_answer", "q3_tests", _RS.format("(t // block_size)", "reserved, reserved - sum(lengths)")),
    ("q3_answer", "q3_tests", _RS.format("(-(-t // block_size))", "reserved - sum(lengths), reserved")),
    ("q3_answer", "q3_tests", _RS.format("(t // block_size + 1)", "reserved, reserved - sum(lengths)")),
    ("q4_answer", "q4_tests", _LEDGER.format(unique="logical",  # the prefix stored per request
                                             blocks="sum(up(prefix + t) for t in tails)")),
    ("q4_answer", "q4_tests", _LEDGER.format(unique="prefix + sum(tails) if tails else 0",
                                             blocks="sum(up(prefix + t) for t in tails)")),
    ("q4_answer", "q4_tests", _LEDGER.format(unique="prefix + sum(tails) if tails else 0",  # tails packed
                                             blocks="up(prefix + sum(tails)) if tails else 0")),
    ("q4_answer", "q4_tests", _LEDGER.format(unique="prefix + sum(tails)",  # no continuations, prefix kept
                                             blocks="up(prefix) + sum(up(t) for t in tails)")),
    ("q5_answer", "q5_tests", _Q5.format(f"usable // (S * {_KV5})")),  # weights
    ("q5_answer", "q5_tests", _Q5.format(f"(int(V.q5_utilization * V.q5_gpu_gib * 1e9) - weights) // (S * {_KV5})")),  # GB
    ("q5_answer", "q5_tests", _Q5.format(f"-(-(usable - weights) // (S * {_KV5}))")),  # rounds up
    ("q5_answer", "q5_tests", _Q5.format("(usable - weights) // (S * math.prod(V.q5_shape) * 2)")),  # no x2
    ("q5_answer", "q5_tests", _Q5.format(f"(usable - weights) // {_KV5}")),  # tokens
    ("q5_answer", "q5_tests", _Q5.format(f"(usable - weights) // (S * {_KV5}) - 3")),
    ("q6_answer", "q6_tests", _Q6.format("n * S / 2")),  # S/2
    ("q6_answer", "q6_tests", _Q6.format("n * sum(S - r for r in range(S)) / S")),  # slack S at r = 0
    ("q6_answer", "q6_tests", _Q6.format("4.0 * n")),
    ("q7_answer", "q7_tests", _Q7.format(f"{_GIB7} // kv_bytes_per_token(*V.q7_shape, 2)")),  # fp16
    ("q7_answer", "q7_tests", _Q7.format(f"{_GIB7} // kv_bytes_per_token(V.q7_shape[0], V.q7_query_heads, V.q7_shape[2], 1)")),
    ("q7_answer", "q7_tests", _Q7.format(f"{_GIB7} // math.prod(V.q7_shape)")),  # no x2
    ("q7_answer", "q7_tests", _Q7.format("int(V.q7_gib * 1e9) // kv_bytes_per_token(*V.q7_shape, 1)")),  # GB
    ("q7_answer", "q7_tests", _Q7.format(f"{_GIB7} // (8 * kv_bytes_per_token(*V.q7_shape, 1))")),  # bits
    # Q9: blocks and capacity of a hybrid model
    ("q9_answer", "q9_tests", "(blocks - freed)", "blocks"),  # sliding-window groups free nothing
    ("q9_answer", "q9_tests", "full_groups * blocks + sliding_groups * (blocks - freed)",
     "L_full * blocks + L_sw * (blocks - freed)"),  # blocks per layer, not per group
    ("q9_answer", "q9_tests", "freed = max(0, T - W + 1) // S", "freed = -(-max(0, T - W + 1) // S)"),  # frees the window's first block
    ("q9_answer", "q9_tests", "sliding_groups * (blocks - freed)", "sliding_groups * -(-W // S)"),  # the window as W / S blocks
    ("q9_answer", "q9_tests", "blocks = -(-T // S)", "blocks = T // S"),  # the partial last block dropped
    ("q9_answer", "q9_tests", "block_bytes = S * 2 * g * H", "block_bytes = S * 2 * H"),  # a block of one layer
    ("q9_answer", "q9_tests", "block_bytes = S * 2 * g * H", "block_bytes = S * 2 * L * H"),  # a block of all layers
    ("q9_answer", "q9_tests", "block_bytes = S * 2 * g * H", "block_bytes = S * g * H"),  # no K and V
    ("q9_answer", "q9_tests", "V.q9_kv_gib * GiB", "int(V.q9_kv_gib * 1e9)"),  # GB
    ("q9_answer", "q9_tests", "(V.q9_kv_gib * GiB // block_bytes) // hybrid_blocks",
     "-(-(V.q9_kv_gib * GiB // block_bytes) // hybrid_blocks)"),  # rounds up
    ("q9_answer", "q9_tests", "(V.q9_kv_gib * GiB // block_bytes) // hybrid_blocks",
     "V.q9_kv_gib * GiB // (2 * H * d * 2 * (L_full * T + L_sw * min(T, W)))"),  # bytes B(T), not whole blocks
    ("q9_answer", "q9_tests", "(V.q9_kv_gib * GiB // block_bytes) // hybrid_blocks",
     "(V.q9_kv_gib * GiB // (S * 2 * L * H * d * 2)) // blocks"),  # every layer full attention
]

PS2_STYLES = [
    ("q1_answer", "import math\n" + _KV.format("math.prod([2, num_layers, num_kv_heads, head_dim, bytes_per_scalar])")),
    ("q1_answer", "import numpy as np\n" + _KV.format("np.int64(2) * num_layers * num_kv_heads * head_dim * bytes_per_scalar")),
    ("q2_answer", _BN.format("(num_tokens + block_size - 1) // block_size")),
    ("q2_answer", _BN.format("num_tokens // block_size + (num_tokens % block_size > 0)")),
    ("q3_answer", "import numpy as np\ndef reserved_and_slack(lengths, block_size):\n"
                  "    t = np.asarray(lengths, dtype=np.int64)\n    r = block_size * (-(-t // block_size)).sum()\n"
                  "    return np.array([r, r - t.sum()])\n"),
    ("q3_answer", _RS.format("blocks_needed(t, block_size)", "[reserved, reserved - sum(lengths)]")),
    ("q4_answer", _LEDGER.format(unique="prefix + sum(tails) if tails else 0",
                                 blocks="(up(prefix) if tails else 0) + sum(up(t) for t in tails)").replace(
                                     "'slack': reserved - unique}", "'slack': reserved - unique, 'k': len(tails)}")),
    ("q5_answer", "import numpy as np\ngpu_blocks = np.int64(int(V.q5_utilization * V.q5_gpu_gib * GiB) - int(V.q5_params * 2)) "
                  "// (V.q5_block_size * 4 * math.prod(V.q5_shape))\n"),
    ("q6_answer", "from fractions import Fraction\nS = V.q6_block_size\n"
                  "expected_slack_slots = V.q6_requests * Fraction(sum((-r) % S for r in range(S)), S)\n"),
    ("q6_answer", "from decimal import Decimal\nS = V.q6_block_size\n"
                  "expected_slack_slots = V.q6_requests * Decimal(sum((-r) % S for r in range(S))) / S\n"),
    ("q6_answer", "import numpy as np\nS = V.q6_block_size\n"
                  "expected_slack_slots = V.q6_requests * np.mean([(S - r) % S for r in range(S)])\n"),
    ("q7_answer", "import numpy as np\nfp8_tokens = np.int64(V.q7_gib * GiB) // (2 * math.prod(V.q7_shape))\n"),
    ("q9_answer", "L, H, d = V.q9_shape\nL_sw, W, T, S = V.q9_sw_layers, V.q9_window, V.q9_tokens, V.q9_block_size\n"
                  "g = min(L - L_sw, L_sw)\nkinds = [(None, L - L_sw), (W, L_sw)]\n"
                  "tables = [n for w, layers in kinds for n in [blocks_needed(T, S) - (0 if w is None else max(0, T - w + 1) // S)]"
                  " * blocks_needed(layers, g)]\n"
                  "hybrid_blocks = sum(tables)\n"
                  "hybrid_requests = V.q9_kv_gib * GiB // (S * kv_bytes_per_token(g, H, d, 2)) // hybrid_blocks\n"),
    ("q9_answer", "import numpy as np\nL, H, d = V.q9_shape\nT, S, W = V.q9_tokens, V.q9_block_size, V.q9_window\n"
                  "g = min(L - V.q9_sw_layers, V.q9_sw_layers)\n"
                  "groups = np.ceil(np.array([L - V.q9_sw_layers, V.q9_sw_layers]) / g).astype(np.int64)\n"
                  "first_kept = max(0, T - W + 1) // S  # first block the window still reaches\n"
                  "hybrid_blocks = int(groups @ np.array([math.ceil(T / S), math.ceil(T / S) - first_kept]))\n"
                  "pool = np.int64(V.q9_kv_gib) * GiB // (np.int64(S) * g * 4 * H * d)\n"
                  "hybrid_requests = int(pool // hybrid_blocks)\n"),
    # a slip in Q1 (no x2) is followed through into Q5 and Q7: only Q1 loses points (checked below)
]

_ALLOC = ("q2_tests", "q3_tests", "q4_tests")  # one class, three tests: a slip in what all use costs all
PS3 = [
    ("q1_answer", "q1_tests", "block_table[p // block_size] * block_size", "block_table[p] * block_size"),  # IndexError
    ("q2_answer", _ALLOC, "return list(self.tables[request_id])", "return list(self.tables[request_id + 1])"),  # TypeError
    ("q1_answer", "q1_tests", "block_table[p // block_size] * block_size", "block_table[p // block_size]"),
    ("q1_answer", "q1_tests", "block_table[p // block_size] * block_size + p % block_size", "p"),
    ("q1_answer", "q1_tests", "p // block_size] * block_size + p % block_size", "(p - 1) // block_size] * block_size + (p - 1) % block_size + 1"),
    ("q2_answer", _ALLOC, "self._take(-(-num_tokens // self.block_size))", "self._take(num_tokens // self.block_size)"),
    ("q2_answer", ("q2_tests", "q4_tests"), "new = -(-(T + num_tokens) // S) - len(table)",
     "new = (T + num_tokens) // S + 1 - len(table)"),  # a block too early at every boundary
    ("q2_answer", "q2_tests", "        if n > len(self.free_ids):\n            raise",
     "        if n > len(self.free_ids):\n            self.free_ids = self.free_ids[1:]\n            raise"),
    ("q2_answer", ("q3_tests", "q4_tests"), "            if self.refs[b] == 0:\n                self.free_ids.append(b)",
     "            self.free_ids.append(b)"),  # frees shared blocks
    ("q2_answer", ("q3_tests", "q4_tests"), "        self.tables[child_id] = list(self.tables[parent_id])",
     "        self.tables[child_id] = self._take(len(self.tables[parent_id]))"),  # a prefix per request
    ("q2_answer", ("q3_tests", "q4_tests"), "        for b in self.tables[child_id]:\n            self.refs[b] += 1",
     "        pass"),  # no ref counts for the child
    ("q2_answer", "q4_tests", "shared_partial = T % S != 0 and self.refs[table[-1]] > 1",
     "shared_partial = False"),  # no copy-on-write
    ("q2_answer", ("q2_tests", "q4_tests"), "shared_partial = T % S != 0 and self.refs[table[-1]] > 1",
     "shared_partial = T % S != 0"),  # copies unshared blocks too
    ("q5_answer", "q5_tests", "repeat_interleave(H_q // H_kv, dim=1)", "repeat(1, H_q // H_kv, 1)"),  # h % H_kv
    ("q5_answer", "q5_tests", " / math.sqrt(D)", ""),
    ("q5_answer", "q5_tests", ".reshape(-1, H_kv, D)[:T]", ".reshape(-1, H_kv, D)"),  # reads garbage
    ("q5_answer", "q5_tests", "T = int(seq_lens[i])", "T = int(seq_lens[i]) - 1"),
    ("q5_answer", "q5_tests", "blocks = block_tables[i][: -(-T // S)].long()",
     "blocks = torch.arange(-(-T // S))"),  # ignores the block table
    # Q7: the chained block keys
    ("q7_answer", "q7_tests", "range(len(tokens) // block_size)", "range(-(-len(tokens) // block_size))"),  # partial block
    ("q7_answer", "q7_tests", "if i == 0 and salt is not None", "if salt is not None"),  # salt in every block
    ("q7_answer", "q7_tests", "parent = hash_block(parent,", "parent = hash_block(None,"),  # keys not chained
    ("q7_answer", "q7_tests", "(salt,) if i == 0", "(salt,) if i == 1"),  # salt in the wrong block
    ("q7_answer", "q7_tests", "range(len(tokens) // block_size)", "range(max(1, len(tokens) // block_size))"),  # a key for a short prompt (hidden cases only)
    # the Triton bonus
    ("bonus_answer", "bonus_tests", "heads = h * GROUP + g", "heads = g * H_KV + h"),  # h % H_kv
    ("bonus_answer", "bonus_tests", "axis=2) * scale", "axis=2)"),  # no 1/sqrt(D)
    ("bonus_answer", "bonus_tests", "ok = j * S + s < T", "ok = s < S"),  # reads past T
    ("bonus_answer", "bonus_tests", "block = tl.load(tables_ptr + b * max_blocks + j)", "block = j"),  # no table
    ("bonus_answer", "bonus_tests", "acc = acc * alpha[:, None] +", "acc = acc +"),  # no online rescaling
    ("bonus_answer", "bonus_tests", "range(0, tl.cdiv(T, S))", "range(0, T // S)"),  # drops the partial block
    # a store outside its tensor kills the process that launches it: the check's child, not the kernel
    ("bonus_answer", "bonus_tests", "tl.store(out_ptr + q_rows", "tl.store(out_ptr - q_rows"),
]

PS3_STYLES = [
    ("q1_answer", "import numpy as np\ndef slot_mapping(block_table, positions, block_size):\n"
                  "    p = np.asarray(positions)\n    return np.asarray(block_table)[p // block_size] * block_size + p % block_size\n"),
    ("q5_answer", "import torch.nn.functional as F\n"
                  "def paged_decode(q, k_cache, v_cache, block_tables, seq_lens):\n"
                  "    S, H_kv, D = k_cache.shape[1:]\n    outs = []\n"
                  "    for b, T in enumerate(seq_lens.tolist()):\n"
                  "        pos = torch.arange(T)\n        ids = block_tables[b][pos // S].long()\n"
                  "        k, v = k_cache[ids, pos % S], v_cache[ids, pos % S]\n"
                  "        G = q.shape[1] // H_kv\n"
                  "        k, v = k.repeat_interleave(G, 1).transpose(0, 1), v.repeat_interleave(G, 1).transpose(0, 1)\n"
                  "        outs.append(F.scaled_dot_product_attention(q[b][:, None], k, v)[:, 0])\n"
                  "    return torch.stack(outs)\n"),
    ("q7_answer", "def chain_keys(tokens, block_size, hash_block, salt=None):\n"
                  "    blocks = [tokens[i:i + block_size] for i in range(0, len(tokens) - block_size + 1, block_size)]\n"
                  "    keys = []\n    for i, b in enumerate(blocks):\n"
                  "        extra = [salt] if salt is not None and not keys else []\n"
                  "        keys.append(hash_block(keys[-1] if keys else None, list(b), extra))\n    return keys\n"),
    ("bonus_answer", "            alpha = tl.exp(m - m_new)", "            alpha = tl.exp2((m - m_new) * 1.4426950408889634)"),
    ("bonus_answer", "            p = tl.exp(scores - m_new[:, None])",  # base-2 exponents, as GPU kernels use
     "            p = tl.exp2((scores - m_new[:, None]) * 1.4426950408889634)"),
]

_BLOCKS3 = "-(-V.q3_prompt_tokens // V.q3_block_size) + V.q3_continuations * -(-V.q3_own_tokens // V.q3_block_size)"
PS1 = [(f"{q}_answer", f"{q}_tests", f"{var} = {value}\n") for q, var, values in [
    ("q1", "block_of_position", ["V.q1_block_table[V.q1_position // V.q1_block_size - 1]",  # counts from 1
                                 "V.q1_block_table[-1]", "V.q1_block_table[0]", "V.q1_position"]),
    ("q2", "largest_waste", ['"internal"', '"external"', '"fragmentation"']),
    ("q3", "shared_blocks_used", [
        "V.q3_continuations * -(-(V.q3_prompt_tokens + V.q3_own_tokens) // V.q3_block_size)",  # prompt per request
        "V.q3_prompt_tokens // V.q3_block_size + V.q3_continuations * -(-V.q3_own_tokens // V.q3_block_size)",
        "-(-(V.q3_prompt_tokens + V.q3_continuations * V.q3_own_tokens) // V.q3_block_size)",  # tails packed
        "V.q3_continuations * -(-V.q3_own_tokens // V.q3_block_size)",  # no prompt
        f"float({_BLOCKS3})"]),
    ("q4", "token_states_read", ["V.q3_prompt_tokens + V.q3_continuations * V.q3_own_tokens",  # what is stored
                                 "V.q3_continuations * V.q3_prompt_tokens",  # no own tokens
                                 f"({_BLOCKS3}) * V.q3_block_size"]),  # slots
    ("q5", "slack_estimate_slots", ["V.q5_requests * V.q5_block_size / 2", "V.q5_requests * (V.q5_block_size + 1) / 2",
                                    "V.q5_requests * V.q5_block_size", "0.94 * V.q5_requests * (V.q5_block_size - 1) / 2"]),
    ("q6", "paging_changes", ['"abd"', '"a"', '"acd"', '["a", "c"]', '"d"']),
] for value in values]

PS1_STYLES = [
    ("q1_answer", "import numpy as np\nblock_of_position = np.int64(V.q1_block_table)[V.q1_position // V.q1_block_size]\n"),
    ("q2_answer", 'largest_waste = " Reservation "\n'),
    ("q5_answer", "from fractions import Fraction\nslack_estimate_slots = Fraction(V.q5_requests * (V.q5_block_size - 1), 2)\n"),
    ("q5_answer", "slack_estimate_slots = 1.015 * V.q5_requests * (V.q5_block_size - 1) / 2  # a rough estimate, within 2%\n"),
    ("q6_answer", 'paging_changes = {"d", "a"}\n'),
    ("q6_answer", 'paging_changes = ["a", "d"]\n'),
    ("q6_answer", 'paging_changes = "a, d"\n'),
    ("q6_answer", 'paging_changes = "DA"\n'),
]

PS4 = [
    ("q1_answer", "q1_tests", 'r["block_size"] == V.q1_block_size', 'r["block_size"] == 256'),  # another row
    ("q1_answer", "q1_tests", 'r["share_slack"]', 'r["share_token_states"]'),
    ("q1_answer", "q1_tests", 'r["share_slack"] for', '100 * r["share_slack"] for'),  # percent
    ("q1_answer", "q1_tests", "seed=V.q1_seed", "seed=V.q1_seed + 1"),  # a classmate's trace, not yours
    ("q2_answer", "q2_tests", "V.q2_samples)", "V.q2_samples + 1)"),
    ("q2_answer", "q2_tests", '"paged+sharing"', '"paged"'),  # no sharing at all
    ("q3_answer", "q3_tests", "V.q3_gpu_gib * GiB", "int(V.q3_gpu_gib * 1e9)"),  # GB for GiB
    ("q3_answer", "q3_tests", "utilization=V.q3_utilization", "utilization=1.0"),
    ("q3_answer", "q3_tests", "block_size=16).tokens", "block_size=16).blocks"),
    ("q3_answer", "q3_tests", "block_size=16).tokens", "block_size=16, dtype='fp32').tokens"),
    ("q4_answer", "q4_tests", 'rows["paged"]["mean_batch"] / rows["max"]["mean_batch"]',
     'rows["max"]["mean_batch"] / rows["paged"]["mean_batch"]'),
    ("q4_answer", "q4_tests", 'rows["paged"]["mean_batch"] / rows["oracle"]["mean_batch"]',
     'rows["paged"]["mean_batch"] - rows["oracle"]["mean_batch"]'),
    ("q4_answer", "q4_tests", 'rows["paged"]["mean_batch"] / rows["oracle"]["mean_batch"]',
     'rows["paged"]["mean_batch"] / rows["max"]["mean_batch"]'),  # the wrong baseline
    ("q5_answer", "q5_tests", '["prefix-sharing savings"]', '["tail slack"]'),
    ("q5_answer", "q5_tests", '["prefix-sharing savings"]', '["reservation waste (contiguous)"]'),
    ("q5_answer", "q5_tests", ' * bytes_per_token(V.q5_model, V.q5_dtype)', ''),  # slots, not bytes
    # Q7: swap or recompute
    ("q7_answer", "q7_tests", "swap_total += 2 * T *", "swap_total += T *"),  # out, never back in
    ("q7_answer", "q7_tests", "bytes_per_token(spec) / link", "bytes_per_token(spec) / (link / 8)"),  # link in bits
    ("q7_answer", "q7_tests", "recompute_total += (2 * spec.num_params * T + 2 * spec.num_layers * spec.num_query_heads "
     "* spec.head_dim * T**2) / flops", "recompute_total += T * spec.weight_bytes / preemption_cost.H100_SXM_HBM_BYTES_PER_S"),
    ("q7_answer", "q7_tests", " + 2 * spec.num_layers * spec.num_query_heads * spec.head_dim * T**2", ""),  # no attention
    ("q7_answer", "q7_tests", "* V.q7_mfu", "* preemption_cost.DEFAULT_MFU"),
    ("q7_answer", "q7_tests", "getattr(preemption_cost, V.q7_link)",
     "preemption_cost.PCIE5_X16_BYTES_PER_S if '4' in V.q7_link else preemption_cost.PCIE4_X16_BYTES_PER_S"),  # the other link
    ("q7_answer", "q7_tests", "max(swap_total, recompute_total) / min(", "max(swap_total, recompute_total) - min("),
    ("q7_answer", "q7_tests", "max(swap_total, recompute_total) / min(swap_total, recompute_total)",
     "min(swap_total, recompute_total) / max(swap_total, recompute_total)"),  # upside down
    ("q7_answer", "q7_tests", '"swap" if swap_total < recompute_total', '"swap" if swap_total > recompute_total'),
    ("q7_answer", "q7_tests", "seed=V.q7_seed)", "seed=V.q7_seed + 1)"),  # a classmate's trace
]

PS4_STYLES = [
    ("q1_answer", "import numpy as np\nrows = block_size_sweep(alpaca_like(200, seed=V.q1_seed), "
                  "block_sizes=(V.q1_block_size,), progress=False)\nslack_share = np.float64(rows[0]['share_slack'])\n"),
    ("q3_answer", "import numpy as np\ncapacity_tokens = np.int64(kv_capacity(V.q3_model, V.q3_gpu_gib * 2**30, "
                  "utilization=V.q3_utilization).tokens)\n"),
    ("q5_answer", "lab = run_lab('parallel sampling', block_size=V.q5_block_size, sharing=True, n=V.q5_samples)\n"
                  "lab_sharing_saved_bytes = int(lab.effects['prefix-sharing savings']) * bytes_per_token(V.q5_model, dtype=V.q5_dtype)\n"),
    ("q7_answer", "import numpy as np\nm = get_model(V.q7_model)\n"
                  "T = np.array([len(p) for p in multi_turn_conversations(V.q7_conversations, turns=(8, 24), max_context=m.max_context, seed=V.q7_seed).prompts], dtype=float)\n"
                  "swap = (2 * T * bytes_per_token(V.q7_model) / getattr(preemption_cost, V.q7_link)).sum()\n"
                  "F = preemption_cost.H100_SXM_BF16_DENSE_FLOPS * V.q7_mfu\n"
                  "redo = ((2 * m.num_params * T + 2 * m.num_layers * m.num_query_heads * m.head_dim * T ** 2) / F).sum()\n"
                  "preempt_winner, preempt_margin = ('Swap ', round(redo / swap, 6)) if swap < redo else ('recompute', np.float64(swap / redo))\n"),
]

MUTATIONS = {"ps1_intuition": PS1, "ps2_math": PS2, "ps3_code": PS3, "ps4_demo": PS4}
STYLES = {"ps1_intuition": PS1_STYLES, "ps2_math": PS2_STYLES, "ps3_code": PS3_STYLES, "ps4_demo": PS4_STYLES}

#: Two slips at once, and what the one-line message must name (each text in it), with none of ``blamed``
#: (the parts that were right): (set, answer cell, test, [(old, new), ...], named, blamed).
COMBINED = [
    ("ps3_code", "q1_answer", "q1_tests", [("* block_size + p % block_size", "+ p % block_size + 1")],
     ["Two slips at once", "multiply it by block_size", "off by one"], ["block table"]),
    ("ps3_code", "q5_answer", "q5_tests", [("repeat_interleave(H_q // H_kv, dim=1)", "repeat(1, H_q // H_kv, 1)"),
                                           (" / math.sqrt(D)", "")],
     ["two slips at once", "h // G", "1 / sqrt(D)"], ["gather", "table", "length"]),
    ("ps3_code", "q5_answer", "q5_tests", [(" / math.sqrt(D)", ""), ("T = int(seq_lens[i])", "T = int(seq_lens[i]) - 1")],
     ["two slips at once", "1 / sqrt(D)", "seq_lens[b] tokens"], ["gather", "h // G", "block_tables"]),
    ("ps3_code", "bonus_answer", "bonus_tests", [("heads = h * GROUP + g", "heads = g * H_KV + h"), ("axis=2) * scale", "axis=2)")],
     ["two slips at once", "h * GROUP", "scale (1 / sqrt(D))"], ["block ids", "mask", "rescaling"]),
]
