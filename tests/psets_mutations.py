"""Plausible wrong answers (each must lose its question's points) and correct answers in other styles.

MUTATIONS[set]: (answer cell, the test cell that must fail, wrong source).
STYLES[set]: (answer cell, correct source in another style), each keeping full marks.
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
_Q5 = "usable = int(0.9 * 80 * GiB)\nweights = int(6.74e9 * 2)\nllama2_7b_blocks = {}\n"
_Q7 = "llama3_70b_fp8_tokens = {}\n"

PS2 = [
    ("q1_answer", "q1_tests", _KV.format("num_layers * num_kv_heads * head_dim * bytes_per_scalar")),  # no x2
    ("q1_answer", "q1_tests", _KV.format("16 * num_layers * num_kv_heads * head_dim * bytes_per_scalar")),  # bits
    ("q2_answer", "q2_tests", _BN.format("num_tokens // block_size")),  # floor
    ("q2_answer", "q2_tests", _BN.format("num_tokens // block_size + 1")),  # off by one at boundaries
    ("q2_answer", "q2_tests", "import math\n" + _BN.format("math.ceil(num_tokens / block_size)")),  # floats
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
    ("q5_answer", "q5_tests", _Q5.format("usable // (16 * kv_bytes_per_token(32, 32, 128, 2))")),  # weights
    ("q5_answer", "q5_tests", _Q5.format("(int(0.9 * 80e9) - weights) // (16 * kv_bytes_per_token(32, 32, 128, 2))")),
    ("q5_answer", "q5_tests", _Q5.format("-(-(usable - weights) // (16 * kv_bytes_per_token(32, 32, 128, 2)))")),
    ("q5_answer", "q5_tests", _Q5.format("(usable - weights) // (16 * 32 * 32 * 128 * 2)")),  # no x2
    ("q5_answer", "q5_tests", _Q5.format("(usable - weights) // kv_bytes_per_token(32, 32, 128, 2)")),  # tokens
    ("q5_answer", "q5_tests", _Q5.format("(usable - weights) // (16 * kv_bytes_per_token(32, 32, 128, 2)) - 3")),
    ("q6_answer", "q6_tests", "expected_slack_S12 = 12 / 2\n"),  # S/2
    ("q6_answer", "q6_tests", "expected_slack_S12 = sum(12 - r for r in range(12)) / 12\n"),  # slack S at r = 0
    ("q6_answer", "q6_tests", "expected_slack_S12 = 4.0\n"),
    ("q7_answer", "q7_tests", _Q7.format("40 * GiB // kv_bytes_per_token(80, 8, 128, 2)")),  # fp16
    ("q7_answer", "q7_tests", _Q7.format("40 * GiB // kv_bytes_per_token(80, 64, 128, 1)")),  # query heads
    ("q7_answer", "q7_tests", _Q7.format("40 * GiB // (80 * 8 * 128 * 1)")),  # no x2
    ("q7_answer", "q7_tests", _Q7.format("int(40e9) // kv_bytes_per_token(80, 8, 128, 1)")),  # GB
    ("q7_answer", "q7_tests", _Q7.format("40 * GiB // (8 * kv_bytes_per_token(80, 8, 128, 1))")),  # bits
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
    ("q5_answer", "import numpy as np\nllama2_7b_blocks = np.int64(int(0.9 * 80 * GiB) - int(6.74e9 * 2)) // (16 * 524288)\n"),
    ("q6_answer", "from fractions import Fraction\nexpected_slack_S12 = Fraction(sum((-r) % 12 for r in range(12)), 12)\n"),
    ("q6_answer", "from decimal import Decimal\nexpected_slack_S12 = Decimal(sum((-r) % 12 for r in range(12))) / 12\n"),
    ("q6_answer", "import numpy as np\nexpected_slack_S12 = np.mean([(12 - r) % 12 for r in range(12)])\n"),
    ("q7_answer", "import numpy as np\nllama3_70b_fp8_tokens = np.int64(40 * GiB) // (2 * 80 * 8 * 128)\n"),
    # a slip in Q1 (no x2) is followed through into Q5 and Q7: only Q1 loses points (checked below)
]

MUTATIONS = {"ps2_math": PS2}
STYLES = {"ps2_math": PS2_STYLES}
