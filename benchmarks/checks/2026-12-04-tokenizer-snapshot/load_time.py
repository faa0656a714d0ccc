"""One fresh process: load_tokenizer of qwen3-chem (a snapshot kept, or through transformers) and whether
transformers was imported."""
import sys, time
t = time.perf_counter()
from inferlab.models.tokenizer_loading import load_tokenizer
tok = load_tokenizer(sys.argv[1])
print(f"{type(tok).__name__}: {time.perf_counter() - t:.2f} s, transformers imported: "
      f"{any(m.startswith('transformers') for m in sys.modules)}")
