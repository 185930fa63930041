"""Export a PageSum checkpoint to an ONNX engine bundle (same as `locsum export`).

    python export/to_onnx.py --kind pagesum --checkpoint CKPT --output BUNDLE [--tokenizer tokenizer.json]
"""

import sys

from locsum_sdk.cli import main

if __name__ == "__main__":
    sys.exit(main(["export", *sys.argv[1:]]))
