"""What each lesson offers the research room and the learning map: its items, central claim and opening lens.

An :class:`Item` is one thing on a lesson's page a learner can attach a question to: the concept,
an equation, a code cell (by the library function it shows), a source, the central claim, a
misconception, or a demo state (a gate's controls; the learner's prediction is added only once
committed). Each carries the evidence to inspect and what would resolve a question about it,
written for that item.
"""
from __future__ import annotations

from dataclasses import dataclass, field

COURSE = "pagedkv: paged KV-cache allocation and PagedAttention"
ROUTE = ("Intuition", "Math", "Code", "Demo")
NEXT_TOPIC = "Cost and Latency Observability"
PREREQUISITES = ("prefill, decode and continuous batching", "GPU memory accounting",
                 "grouped-query attention (KV heads shared by query heads)")
TRY = ("change one thing (a block size, a shared prompt, a trace) and predict what will visibly move "
       "before you look")
KINDS = ("concept", "equation", "code", "source", "claim", "misconception", "demo")


@dataclass(frozen=True)
class Item:
    """One item of a lesson: ``content`` is shown as is; ``function`` (``"module:name"``) is a library
    function whose source is the content; ``gate`` names the prediction a demo state belongs to."""
    id: str
    kind: str
    title: str
    content: str
    evidence: tuple
    resolve: tuple
    function: str | None = None
    gate: str | None = None


@dataclass(frozen=True)
class Lens:
    """A lesson's opening prediction: which kind of change, or which visible object, carries the idea."""
    id: str
    question: str
    choices: tuple
    answer: str
    mistakes: dict
    reveal: str


@dataclass(frozen=True)
class Lesson:
    name: str
    title: str
    section: str          # one of ROUTE
    claim: str
    lens: Lens
    items: tuple = field(default=())

    def item(self, item_id: str) -> Item:
        for it in self.items:
            if it.id == item_id:
                return it
        raise KeyError(f"lesson {self.name!r} has no item {item_id!r}; its items: {[i.id for i in self.items]}")


CLAIM = ("Paged allocation keeps a request's logical token history apart from its physical storage: "
         "fixed-size blocks anywhere in the pool, found through a block table. That removes reservation "
         "and external fragmentation and lets requests share blocks, while tail slack stays inside partly "
         "filled last blocks. It does not change what attention computes.")

KWON = ("W. Kwon, Z. Li, S. Zhuang, et al. Efficient Memory Management for Large Language Model Serving with "
        "PagedAttention. SOSP 2023.")


def _claim(checked: str) -> Item:
    return Item("claim", "claim", "The central claim", CLAIM,
                (f"What this lesson checks locally: {checked}",
                 "The sections of Kwon et al. 2023 the lesson cites, read for their scope",
                 "What the lesson's 'Not claimed' paragraph leaves out"),
                ("I can say which part of the claim this lesson checked and which part rests on the paper",
                 "I can name one measurement that would test the part not checked here",
                 "I can restate the claim with the symbols T_i, S, N_i, R and W"))


LESSONS = {
    "01_intuition": Lesson(
        "01_intuition", "Logical tokens, physical blocks", "Intuition", CLAIM,
        Lens("lens-01", "Before any figure: three continuations share one 12-token prompt. When their "
             "KV caches share the prompt's blocks, which of these gets smaller?",
             ("the tokens each request attends to", "the slots the batch reserves",
              "the bytes one token's keys and values take", "the error of the attention output"),
             "the slots the batch reserves",
             {"the tokens each request attends to": "sharing changes storage, not what each request reads",
              "the bytes one token's keys and values take": "per-token bytes are set by the model, not the layout",
              "the error of the attention output": "attention over the same tokens gives the same result"},
             "Sharing stores the prompt once and maps its blocks into every table, so the batch reserves "
             "fewer slots. Each request still attends to its whole history, and one token still costs the "
             "same bytes. Section 2 draws it; section 3 counts what attention reads."),
        (Item("concept", "concept", "Logical history and physical blocks",
              "A request's KV cache is one logical sequence of positions 0, 1, 2, ...; a paged allocator "
              "stores it in blocks of S slots anywhere in the pool, and the block table maps logical block "
              "j to a physical block. Position p lives in slot p mod S of block table[p // S].",
              ("The block map of section 1: A1's arrows from logical to physical blocks",
               "Why A1's fourth logical block sits in physical block 9",
               "The hatched tail slack at the end of each last block"),
              ("I can find the physical block and slot of any position from a block table",
               "I can say why the blocks need not be next to each other",
               "I can predict where a new token goes when its last block is full")),
         Item("demo-waste", "demo", "The contiguous layout after one decode step",
              "Controls: A1-A3 after one decode step, each reserving a contiguous run of 32 slots in an "
              "arena of 112, a waiting request of 20 tokens. Question: which unused memory is largest?",
              ("The contiguous figure: reserved, internal and external fragmentation slots",
               "How many slots each run reserves against each request's final length",
               "Whether the waiting request's run fits in the free gap"),
              ("I can name the three kinds of unused memory and count each here",
               "I can say which one paging removes and which one stays",
               "I can predict how the counts change if each run reserved 64 slots"), gate="q-waste"),
         Item("demo-blocks", "demo", "The shared layout's blocks",
              "Controls: A1-A3 after one decode step, S = 4, the 12-token prompt shared. Question: how many "
              "physical blocks does the batch use?",
              ("The three-ways figure: which blocks have ref count 3",
               "Each request's own block after its first new token",
               "ceil(12 / 4) prompt blocks against one block per tail"),
              ("I can count the blocks of a shared batch by hand",
               "I can say which blocks are stored once and mapped three times",
               "I can predict the count for a fourth continuation"), gate="q-blocks"),
         Item("code-replay", "code", "replay.play_paged: the batch on the real block manager",
              "The lesson's figures come from this function, which plays a ledger batch on a BlockManager.",
              ("What play_paged does at admission, at fork and at each decode step",
               "BlockManager.stats(): logical, unique, reserved, slack",
               "The assert that the paged layout uses ceil(T / S) blocks per request"),
              ("I can trace one request through play_paged by hand",
               "I can say where sharing enters (fork or prefix cache)",
               "I can change one argument and predict the new block count"),
              function="pagedkv_lib.lesson.replay:play_paged"),
         Item("mis-speed", "misconception", "Half the memory means twice as fast",
              "A workload that reserves half the KV memory under paging is not thereby served twice as fast.",
              ("Section 3's three questions kept apart",
               "The paper's 20-26% slower paged attention kernel, on the attention op alone",
               "What a larger batch needs to turn into throughput"),
              ("I can say what a slot count does and does not tell me",
               "I can name one cost paging adds",
               "I can name the measurement that would settle speed")),
         Item("source-kwon", "source", "Kwon et al. 2023 (PagedAttention)", KWON + " Sections 3-4: memory "
              "categories of the Orca baselines, block tables, sharing.",
              ("The paper's figure of KV memory usage by category",
               "The definition of the Orca-Max, Pow2 and Oracle baselines",
               "Which figures the lesson quotes and which it reproduces"),
              ("I can say which numbers come from the paper and which from this notebook",
               "I can find the section behind each quoted figure",
               "I can name one claim of the paper this course does not test")),
         _claim("every figure is drawn from a live BlockManager or ContiguousArena; the cells assert "
                "ceil(T/S) blocks per request and the same logical tokens in all three layouts"))),
    "02_math": Lesson(
        "02_math", "Counting what a paged KV cache stores", "Math", CLAIM,
        Lens("lens-02", "Request lengths spread over many blocks. If the block size S doubles from 16 to 32, "
             "what happens to the average tail slack per request?",
             ("it halves", "it stays about the same", "it about doubles", "it grows about four times"),
             "it about doubles",
             {"it halves": "larger blocks leave more empty slots in the last block, not fewer",
              "it stays about the same": "slack depends on S: the last block has up to S - 1 empty slots",
              "it grows about four times": "slack grows linearly with S, not with its square"},
             "The last block of a request has between 0 and S - 1 empty slots; when lengths spread over "
             "many blocks, every remainder is about equally likely, so the average grows linearly with S: "
             "from 7.5 at S = 16 to 15.5 at S = 32. Section 6 derives it and tests it on 2,000 lengths."),
        (Item("concept", "concept", "Logical tokens are not stored tokens",
              "With sharing, T_logical counts a shared prefix once per continuation; T_unique counts it once. "
              "Blocks and slack are counted from what is stored.",
              ("Section 4's ledger: logical, unique, reserved, slack",
               "T_shared_saved = (k - 1) P for one group",
               "The block tables drawn at S = 4 and S = 8"),
              ("I can compute T_logical and T_unique for a shared batch",
               "I can say why sharing never changes what attention reads",
               "I can explain why slack can grow with sharing at S = 8")),
         Item("eq-ctok", "equation", "Eq. 1: bytes per token",
              r"C_{\mathrm{tok}} = 2 \cdot L \cdot H_{kv} \cdot d_{\mathrm{head}} \cdot b",
              ("acc.bytes_per_token and the assert beside it",
               "The models table: L, H_q and H_kv of each preset",
               "Why DeepSeek-V3 (MLA) needs another formula"),
              ("I can compute C_tok for a model from its config",
               "I can say why H_kv and not H_q sizes the cache",
               "I can predict the effect of fp8 on C_tok")),
         Item("eq-slack", "equation", "Blocks, reserved slots and tail slack",
              r"N_i = \lceil T_i / S \rceil,\quad R = S \sum_i N_i,\quad W = R - \sum_i T_i",
              ("The asserts of section 3: slack in [0, S - 1] per request",
               "acc.blocks_needed, acc.reserved_slots, acc.tail_slack",
               "The expected slack (S - 1) / 2 and the experiment of section 6"),
              ("I can compute N_i, R and W for any lengths and S",
               "I can say when (S - 1) / 2 fails",
               "I can predict W for a batch before running it")),
         Item("demo-capacity", "demo", "KV capacity on an 80 GiB GPU",
              "Controls: Llama-3-8B against OPT-13B, fp16, utilization 0.9, blocks of 16. Question: how many "
              "times as many KV-cache tokens does Llama-3-8B fit?",
              ("acc.kv_capacity and the floor in its formula",
               "Each model's weights in GiB and C_tok in KiB",
               "The capacity figure across six models"),
              ("I can compute the token budget from the GPU, the weights and C_tok",
               "I can say how much of the ratio comes from GQA",
               "I can predict the capacity of another preset"), gate="q-capacity"),
         Item("mis-slack", "misconception", "Block size 1 is best, since it has no slack",
              "Slack shrinks with S, but block tables, kernel efficiency and prefix-cache granularity pull "
              "the other way.",
              ("Section 6: slack per request against S",
               "What a block table of one entry per token costs",
               "Lesson 03's prefix cache, which shares whole blocks only"),
              ("I can name one cost of small blocks", "I can say why vLLM chose 16",
               "I can predict slack and table size for S = 1 and S = 256")),
         _claim("the asserts of sections 3 and 4 (N_i, R, W, slack in [0, S - 1], T_unique = T_logical - "
                "(k - 1) P) and the experiment of section 6"))),
    "03_code": Lesson(
        "03_code", "The real machinery, read as code", "Code", CLAIM,
        Lens("lens-03", "A server's prefix cache holds the full blocks of a prompt it has seen. A new request "
             "repeats that prompt and adds its own tokens. What does a cache hit save it?",
             ("memory only", "prefill compute only", "both the memory and the prefill compute of those blocks",
              "nothing until the server restarts"),
             "both the memory and the prefill compute of those blocks",
             {"memory only": "the cached blocks hold computed keys and values: the model skips them in prefill",
              "prefill compute only": "the hit maps the same physical blocks: nothing is stored twice",
              "nothing until the server restarts": "a hit is served at admission, in the running server"},
             "A hit maps the cached blocks into the new request's table (no new memory) and their keys and "
             "values are already computed (no prefill for those tokens). Section 1 shows hits, and why the "
             "last prompt token is always computed again."),
        (Item("concept", "concept", "A block manager with vLLM's semantics",
              "Blocks carry ref counts; each full block is filed in the prefix cache under a node for its whole "
              "prefix (the parent's node, its tokens, a salt); "
              "fork shares every block, and what a later write into a shared block costs is the q-cow gate's "
              "question.",
              ("Section 1, steps 1-4, and the block maps after each",
               "check_invariants, which rebuilds every count from the tables",
               "The free queue: uncached blocks first, cached free blocks last"),
              ("I can predict a hit's size for any prompt",
               "I can say which write triggers copy-on-write",
               "I can explain why the manager stores 30 token states where the ledger stores 22")),
         Item("code-slots", "code", "slot_mapping: where token p is written",
              "The slot of position p is table[p // S] * S + p % S.",
              ("The printed slot mapping of r1", "write_kv in section 3",
               "What a wrong slot would do to attention"),
              ("I can compute the slot of any position from a table",
               "I can say why the mapping stops being the identity",
               "I can predict the slots of a forked request after copy-on-write"),
              function="pagedkv_lib.blocks.slot_mapping:table_slots"),
         Item("code-append", "code", "BlockManager.append_tokens: copy-on-write",
              "The append path that takes a fresh block, or copies a shared partial one before writing.",
              ("The (src, dst) pair append_tokens returns", "The ref counts before and after",
               "The block map after r2b, then r2, append"),
              ("I can say when append copies and when it writes in place",
               "I can count the copies for n samples of one prompt",
               "I can say who copies the K/V states (the attention layer)"),
              function="pagedkv_lib.blocks.manager:BlockManager.append_tokens"),
         Item("demo-hit", "demo", "A prompt of exactly two cached full blocks",
              "Controls: S = 4, r3 = r1's first 8 tokens, both blocks in the prefix cache. Question: how "
              "many of r3's tokens come from the cache?",
              ("BlockManager.add_request and where its lookup stops", "What sampling r3's first new token needs",
               "add_request's return value for r3"),
              ("I can predict the hit for any prompt length", "I can say which of r3's tokens are computed, and why",
               "I can predict the hit for 9 tokens"), gate="q-hit"),
         Item("mis-nan", "misconception", "Out-of-order blocks change the attention result",
              "Paged decode reads the same tokens through the block table; how far its output lands from dense "
              "attention is the q-attn gate's question.",
              ("The NaN-filled cache and the three paged decodes against dense",
               "The online softmax's m, l and acc after each block",
               "The lengths that keep each request inside its own slots"),
              ("I can say why NaN in unused slots is never read", "I can explain the rescale e^(m_old - m_new)",
               "I can predict the error of a fused kernel")),
         _claim("section 1's hits, fork and copy-on-write on a real BlockManager; every paged decode checked "
                "against dense attention by section 3's asserts; tinylm's identical tokens from both caches"))),
    "04_demo": Lesson(
        "04_demo", "The allocation lab", "Demo", CLAIM,
        Lens("lens-04", "A server stops reserving each request's whole context up front and stores its KV "
             "cache in blocks of 16 instead. On the same GPU, what does it mainly gain?",
             ("faster attention for each token", "more requests running at once",
              "shorter prompts to prefill", "fewer layers to compute"),
             "more requests running at once",
             {"faster attention for each token": "a paged kernel adds an indirection: it is not faster per token",
              "shorter prompts to prefill": "paging changes storage, not the prompts",
              "fewer layers to compute": "the model is unchanged"},
             "Memory no longer reserved for tokens that may never come holds other requests' tokens, so the "
             "batch grows; the paged attention kernel itself is, if anything, slower. Section 3's simulator "
             "measures the batch."),
        (Item("concept", "concept", "Three effects in one unit",
              "Tail slack, prefix-sharing savings and contiguous reservation waste, all in token slots, for "
              "the same sequences at the same moment.",
              ("The lab's ledger and the contiguous comparison after a commit",
               "Which effect grows with S and which with the context",
               "The explanation under each reveal"),
              ("I can predict the largest effect for a trace and S",
               "I can say why sharing saves nothing past some S",
               "I can say which effect paging cannot remove")),
         Item("lab", "demo", "The allocation lab's current state",
              "The lab's trace, block size, sharing and n, and your prediction once committed.",
              ("The block map: shared blocks, tail slack, cached free blocks",
               "The ledger: logical, unique, reserved, slack",
               "The contiguous runs of the same sequences"),
              ("I can say why this configuration's largest effect wins",
               "I can name the control that would change the winner",
               "I can predict the winner before the next commit"), gate="lab-effect"),
         Item("demo-sim", "demo", "The simulator's batch",
              "Controls: a ShareGPT-like trace of 300 requests, five memory policies, OPT-13B on 40 GiB. "
              "Question: how many times larger is the paged batch than max's?",
              ("The mean running batch per policy", "Preemptions per request under paged memory",
               "The memory share holding token states"),
              ("I can say how the paged batch compares with max's, and why", "I can say why paged runs preempt",
               "I can name what the simulator does not measure (time)"), gate="sim-batch"),
         Item("mis-partial", "misconception", "A shared prompt is shared whatever the block size",
              "Only full blocks are shared: a prompt shorter than one block shares nothing.",
              ("The lab at S = 4, 8 and 32 for the A1-A3 batch", "Copy-on-write copies in the ledger table",
               "The practice's fork of a 20-token prompt at S = 8"),
              ("I can predict the savings from the prompt length and S",
               "I can say which block gets copied", "I can find the S where savings vanish")),
         _claim("the lab checks the manager's invariants and W = R - T_unique; the simulator checks the paged "
                "batch against max's; the practice's answer comes from the real manager"))),
}
"""The four lessons, by notebook name."""


def lesson(name: str) -> Lesson:
    """The lesson called ``name`` (``"01_intuition"`` ... ``"04_demo"``)."""
    if name not in LESSONS:
        raise KeyError(f"no lesson {name!r}; the lessons: {sorted(LESSONS)}")
    return LESSONS[name]
