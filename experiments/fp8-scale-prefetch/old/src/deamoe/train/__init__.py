"""Training: data shards, tokenizer, the trainer (one process or torchrun + FSDP2), the runs."""
