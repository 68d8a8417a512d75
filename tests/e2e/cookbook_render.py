"""Run by tinker-cookbook's python (tests/e2e/test_tinker_cookbook.py): renders chats
(JSONL of {"messages": [...]}) with the cookbook's recommended renderer for MODEL_NAME and
the tokenizer in TOKENIZER_DIR, and writes {"tokens": [...], "mask": [...]} lines: mask
covers the tokens from the first assistant message on, 1 on every assistant message's.
Chats longer than MAX_TOKENS are left out.

    python cookbook_render.py TOKENIZER_DIR MODEL_NAME CHATS.jsonl OUT.jsonl MAX_TOKENS
"""
import json
import sys

from tinker_cookbook import model_info, renderers
from tinker_cookbook.tokenizer_utils import get_tokenizer

tok_dir, model, src, dst, max_tokens = sys.argv[1:6]
renderer = renderers.get_renderer(model_info.get_recommended_renderer_name(model), get_tokenizer(tok_dir))
with open(src) as f, open(dst, "w") as out:
    for line in f:
        model_input, weights = renderer.build_supervised_example(json.loads(line)["messages"],
                                                                 renderers.TrainOnWhat.ALL_ASSISTANT_MESSAGES)
        if model_input.length > int(max_tokens):
            continue
        w = [1 if x > 0 else 0 for x in weights.tolist()]
        first = w.index(1)
        out.write(json.dumps({"tokens": model_input.to_ints(), "mask": w[first:]}) + "\n")
