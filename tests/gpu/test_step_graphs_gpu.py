"""The decoding step replayed from CUDA graphs on a GPU (`backends.step_graphs`): the same tokens as the eager
step for every kind, in float32, float16 and bfloat16 (a replay launches the very kernels the eager step does), with
the cache growing into a second bucket. Skipped without a GPU."""

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["pagesum", "hierencdec", "dyle", "hiersumm"])
def test_replayed_steps_give_the_eager_tokens(checkpoint_dir, kind, dtype):
    import numpy as np

    from locsum_sdk.backends.torch import generate_from_ids
    from locsum_sdk.constants import CACHE_CHUNK
    from locsum_sdk.generation import GenerationOptions
    from locsum_sdk.modeling.checkpoint import load_checkpoint

    model = load_checkpoint(checkpoint_dir, kind=kind).model.to(getattr(torch, dtype))
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    units = [[tuple(int(t) for t in rng.integers(4, vocab, 40)) for _ in range(5)],
             [tuple(int(t) for t in rng.integers(4, vocab, 25)) for _ in range(2)]]
    options = GenerationOptions(num_beams=4, max_length=CACHE_CHUNK + 8, min_length=CACHE_CHUNK + 4)
    eager = generate_from_ids(model, units, options, device="cuda", cuda_graphs=False)
    replayed = generate_from_ids(model, units, options, device="cuda", cuda_graphs=True)
    assert [h.token_ids for h in replayed] == [h.token_ids for h in eager]
