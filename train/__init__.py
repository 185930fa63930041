"""Training: data loading, tokenizer training, objectives, trainers and ROUGE evaluation (needs the `train` extra)."""
