#!/usr/bin/env bash
# Install, then profile the bundled GPT example (on the GPU if there is one) and recommend.
cd "$(dirname "$0")/.."
source scripts/_install.sh "triton,plot"
advisor profile examples/gpt_block.py --steps 3
advisor recommend
