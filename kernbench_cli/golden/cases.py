"""The golden cases: every shipped kernel on every shipped topology, and the variants
that matter. Large topologies run smaller problems, so that `golden regen` stays quick."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str  # also the file name: goldens/<name>.json
    kernel: str
    topology: str
    params: tuple[str, ...] = ()
    seed: int = 0


CASES: tuple[Case, ...] = (
    Case("sharded_gemm.composite.default", "sharded_gemm", "default", ("mode=composite",)),
    Case("sharded_gemm.primitive.default", "sharded_gemm", "default",
         ("mode=primitive", "M=32", "K=256", "N=1024")),
    Case("sharded_gemm.composite.sip", "sharded_gemm", "sip", ("mode=composite",)),
    Case("sharded_gemm.primitive.sip", "sharded_gemm", "sip",
         ("mode=primitive", "M=32", "K=128", "N=2048")),
    Case("sharded_gemm.composite.rack", "sharded_gemm", "rack",
         ("mode=composite", "M=16", "K=64", "N=131072")),
    Case("gqa_attention.default", "gqa_attention", "default"),
    Case("gqa_attention.sip", "gqa_attention", "sip"),
    Case("gqa_attention.llama3-8b-32k.sip", "gqa_attention", "sip",
         ("model=llama3-8b", "seq_len=32768")),
    Case("gqa_attention.rack", "gqa_attention", "rack",
         ("heads_q=4", "heads_kv=1", "head_dim=32", "seq_len=16384")),
    Case("softmax.default", "softmax", "default"),
    Case("softmax.sip", "softmax", "sip"),
    Case("softmax.rack", "softmax", "rack", ("cols=256",)),
    Case("rmsnorm.default", "rmsnorm", "default"),
    Case("rmsnorm.llama3-8b.sip", "rmsnorm", "sip", ("model=llama3-8b",)),
    Case("rmsnorm.rack", "rmsnorm", "rack", ("cols=256",)),
    Case("all_reduce.ring.default", "all_reduce", "default"),
    Case("all_reduce.hier.sip", "all_reduce", "sip", ("algo=hier", "bytes=65536")),
    Case("llama_decode.tiny.default", "llama_decode", "default", ("batch=2", "context=37")),
    Case("llama_decode.tiny-prefill.default", "llama_decode", "default",
         ("batch=2", "context=5", "prompt=12", "chunk=5")),
    Case("llama_decode.tiny-fp8.default", "llama_decode", "default",
         ("batch=2", "context=37", "weights=fp8", "kv=fp8")),
    Case("llama_decode.llama3-8b-2layers.sip", "llama_decode", "sip",
         ("model=llama3-8b", "layers=2", "context=256")),
)
