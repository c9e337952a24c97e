"""Sizes and repeat counts of every benchmark row, by preset: ``cpu`` (the defaults) is the project's CPU
target size, ``gpu`` the base Transformer with sizes cut so ``benchmarks/gpu.sh`` fits an 8-minute lease,
``quick`` shrinks everything to one thread for the smoke test (its numbers say nothing about speed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .models import ModelSize


@dataclass
class BenchConfig:
    preset: str = "cpu"
    device: str = "cpu"
    seed: int = 0
    warmup: int = 2
    repeats: int = 7
    threads: int | None = None  # torch.set_num_threads for the whole run (None: PyTorch's default)
    # 1. training step
    size: ModelSize = field(default_factory=ModelSize)
    batch: int = 64
    seq_len: int = 64
    min_len_frac: float = 0.75  # sentence lengths uniform in [min_len_frac * seq_len, seq_len]
    # 2. framework overhead
    overhead_steps: int = 40
    overhead_skip: int = 10  # steps excluded from the steady-state window (start-up, warm-up)
    overhead_repeats: int = 3
    overhead_data: str = "multi30k"  # multi30k (if its files are found) else numbers
    overhead_tokens_per_batch: int = 4096
    # 3. padding: tokens per batch of the token-budget sampler
    padding_tokens_per_batch: int = 4096
    decode_batch: int = 32
    decode_src_len: int = 32
    decode_len: int = 64
    decode_repeats: int = 3
    attn_d_model: int = 256
    attn_heads: int = 4
    attn_ns: list[int] = field(default_factory=lambda: [128, 256, 512, 1024, 2048, 4096, 8192])
    attn_repeats: int = 3
    rec_d: int = 256
    rec_heads: int = 4
    rec_batch: int = 8
    rec_ns: list[int] = field(default_factory=lambda: [16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
    rec_repeats: int = 3
    decode_beam_size: int = 4
    mfu_matmul_n: int = 8192
    gpt2: dict = field(default_factory=lambda: {"d_model": 768, "n_heads": 12, "n_layers": 12, "vocab": 50257})
    gpt2_seq_len: int = 256
    gpt2_batch: int = 2
    gpt2_compile: bool = False
    ddp_devices: list[int] = field(default_factory=list)
    ddp_steps: int = 60
    ddp_skip: int = 20
    # extra run.py overrides for the overhead/ddp runs (e.g. trainer.precision=bf16-mixed)
    run_overrides: list[str] = field(default_factory=list)


PRESETS = {
    "cpu": {},
    "gpu": dict(
        warmup=5,
        repeats=20,
        size=ModelSize(d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1, vocab=32000),
        batch=256,
        overhead_steps=120,
        overhead_skip=40,
        overhead_repeats=2,
        overhead_tokens_per_batch=16384,
        decode_batch=128,
        decode_repeats=5,
        attn_d_model=1024,
        attn_heads=16,
        attn_ns=[128, 256, 512, 1024, 2048, 4096, 8192, 16384],
        rec_d=1024,
        rec_heads=16,
        rec_batch=32,
        rec_ns=[16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
        ddp_steps=300,
        ddp_skip=100,
        run_overrides=["trainer.precision=bf16-mixed"],
        gpt2_seq_len=1024,
        gpt2_batch=16,
        gpt2_compile=True,
    ),
    "quick": dict(
        warmup=1,
        repeats=3,
        threads=1,
        size=ModelSize(d_model=64, n_heads=2, n_layers=1, d_ff=256, dropout=0.1, vocab=1000, max_len=128),
        batch=8,
        seq_len=24,
        overhead_steps=10,
        overhead_skip=4,
        overhead_repeats=1,
        overhead_data="copy",
        overhead_tokens_per_batch=512,
        decode_batch=4,
        decode_src_len=12,
        decode_repeats=2,
        attn_d_model=64,
        attn_heads=2,
        attn_ns=[128, 256, 512, 1024, 2048],
        attn_repeats=2,
        rec_d=64,
        rec_heads=2,
        rec_batch=2,
        rec_ns=[16, 64, 256, 1024],
        rec_repeats=2,
        mfu_matmul_n=512,
        ddp_steps=10,
        ddp_skip=4,
        gpt2={"d_model": 64, "n_heads": 2, "n_layers": 2, "vocab": 1000},
        gpt2_seq_len=64,
        gpt2_batch=2,
    ),
}
"""Each preset's values that differ from :class:`BenchConfig`'s defaults (the ``cpu`` preset)."""


def preset(name: str, device: str = "cpu") -> BenchConfig:
    """The configuration for ``name`` in :data:`PRESETS` (a ``KeyError`` for any other name)."""
    return BenchConfig(preset=name, device=device, **PRESETS[name])
