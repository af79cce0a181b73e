"""The `serve` section of the pipeline config (described in workflow/schemas/serve.schema.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field

from deamoe.errors import ConfigError

CLIENTS = ("auto", "vllm", "builtin")
SLO_METRICS = ("tpot_mean_ms", "tpot_median_ms", "tpot_p99_ms", "tpot_server_mean_ms")
# the model config key (set by --hf-overrides) that carries serve.ffn_weights to the vLLM model
FFN_WEIGHTS_KEY = "deamoe_ffn_weights"
# The vLLM server options that serve.server_command sets, and from what: given again in
# serve.extra_server_args, vLLM takes the later value without a word (a --dtype other than the
# results record, a --port or model name the benchmark client does not know).
SERVER_OPTIONS = {"--model": "the serve command's --checkpoint", "--served-model-name": "the serve command's --model",
                  "--host": "the serve command (127.0.0.1)", "--port": "the serve command (a free port)",
                  "--dtype": "serve.dtype", "--max-model-len": "serve.max_model_len",
                  "--max-num-seqs": "serve.max_num_seqs", "--seed": "serve.seed",
                  "--enforce-eager": "serve.enforce_eager", "--kv-cache-memory-bytes": "serve.kv_cache_memory_bytes",
                  "--uvicorn-log-level": "the serve command (warning)",
                  "--hf-overrides": "serve.ffn_weights (other than bf16)"}


@dataclass
class ServeSettings:
    # Request concurrency levels (Figure 3: 4 .. 128 on the A40; the tiny CPU default is smaller).
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    input_len: int = 64  # prompt tokens per request (random token ids, fixed length)
    output_len: int = 32  # generated tokens per request (EOS ignored)
    rounds: int = 4  # each level sends rounds * concurrency requests (continuous stream)
    min_requests: int = 8  # ... but at least this many
    warmups: int = 2  # warm-up requests before each level (not measured)
    # TPOT budgets (ms) for slo.csv, strictest first; the paper's are [20, 30] on the A40.
    tpot_budgets_ms: list[float] = field(default_factory=lambda: [20.0, 30.0])
    # TPOT column compared with the budgets: client-side mean (the paper's) or vLLM's own
    # engine-timestamp mean (robust when a small shared CPU starves the client).
    slo_metric: str = "tpot_mean_ms"
    dtype: str = "float32"  # vLLM --dtype
    enforce_eager: bool = True  # tiny CPU: skip torch.compile (~15 s per start); GPU: false
    kv_cache_memory_bytes: str | int | None = "1G"  # --kv-cache-memory-bytes (size or bytes); None: vLLM's default
    max_model_len: int | None = None  # default input_len + output_len + 16
    max_num_seqs: int | None = None  # default max(concurrency)
    startup_timeout_s: float = 600.0
    level_timeout_s: float = 1200.0  # one concurrency level, all requests
    client: str = "auto"  # vllm: vLLM's benchmark client; builtin: deamoe.serve.client
    seed: int = 0
    extra_server_args: list[str] = field(default_factory=list)
    # the GPU FFN kernels' weights: bf16, or block-scaled FP8 (128 x 128 blocks) weight-only
    # ("fp8") or with activations quantised per group ("fp8-w8a8"); the PyTorch path stays bf16
    ffn_weights: str = "bf16"

    def __post_init__(self):
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise ConfigError(f"serve.concurrency={self.concurrency!r} must be positive integers")
        for key in ("input_len", "output_len", "rounds", "min_requests"):
            if getattr(self, key) < 1:
                raise ConfigError(f"serve.{key}={getattr(self, key)} must be >= 1")
        if self.output_len < 2:
            raise ConfigError("serve.output_len must be >= 2 (TPOT excludes the first token)")
        if self.warmups < 0:
            raise ConfigError(f"serve.warmups={self.warmups} must be >= 0")
        if not self.tpot_budgets_ms or any(b <= 0 for b in self.tpot_budgets_ms):
            raise ConfigError(f"serve.tpot_budgets_ms={self.tpot_budgets_ms!r} must be positive")
        if self.slo_metric not in SLO_METRICS:
            raise ConfigError(
                f"serve.slo_metric={self.slo_metric!r} is not one of {', '.join(SLO_METRICS)}")
        if self.client not in CLIENTS:
            raise ConfigError(f"serve.client={self.client!r} is not one of {', '.join(CLIENTS)}")
        if self.ffn_weights != "bf16":  # (the default imports no kernel code: light imports)
            from deamoe.kernels.fp8 import PRECISIONS

            if self.ffn_weights not in PRECISIONS:
                raise ConfigError(f"serve.ffn_weights={self.ffn_weights!r} is not one of "
                                  f"{', '.join(PRECISIONS)}")
        if isinstance(self.kv_cache_memory_bytes, int) and not isinstance(self.kv_cache_memory_bytes, bool):
            if self.kv_cache_memory_bytes < 1:
                raise ConfigError(f"serve.kv_cache_memory_bytes={self.kv_cache_memory_bytes} leaves vLLM no KV "
                                  "cache (its server would stop at start-up); give a size such as 1G, or null")
            self.kv_cache_memory_bytes = str(self.kv_cache_memory_bytes)  # vLLM's flag reads bytes
        if isinstance(self.kv_cache_memory_bytes, str) and not any(c in "123456789" for c in
                                                                   self.kv_cache_memory_bytes):
            raise ConfigError(f"serve.kv_cache_memory_bytes={self.kv_cache_memory_bytes!r} leaves vLLM no KV "
                              "cache (its server would stop at start-up); give a size such as 1G, or null")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"serve.dtype={self.dtype!r} is not one of auto, float32, bfloat16, float16")
        for arg in self.extra_server_args:
            option = arg.split("=", 1)[0].replace("_", "-")  # (vLLM reads --max_model_len alike)
            # (--hf-overrides is the command's only where the weights are not bf16)
            ours = option in SERVER_OPTIONS and not (option == "--hf-overrides"
                                                     and self.ffn_weights == "bf16")
            if ours:
                raise ConfigError(f"serve.extra_server_args gives {option}, which {SERVER_OPTIONS[option]} "
                                  "sets (vLLM would take the later one without a word); leave it out")

    def requests_at(self, concurrency: int) -> int:
        return max(self.min_requests, self.rounds * concurrency)

    @property
    def model_len(self) -> int:
        return self.max_model_len or self.input_len + self.output_len + 16

    @property
    def num_seqs(self) -> int:
        return self.max_num_seqs or max(self.concurrency)
