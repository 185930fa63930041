"""PyTorch definitions of the model kinds: the one source of truth for their maths (needs torch); their
configurations are in `locsum_sdk.configs`."""
