"""Parse every candidate's rendered `vllm serve` argv with the installed vLLM's own argument parser.

    python scripts/check_vllm_argv.py [SPACE ...]

Needs vLLM importable (no GPU needed: the platform is forced to CPU so the parser can be built).
Prints one line per candidate and exits 1 when vLLM rejects any argv.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def parser():
    import vllm.platforms as platforms

    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        from vllm.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser  # 0.33
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # 0.26
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser())


def main(spaces: list[str]) -> int:
    from autotune.engines.vllm import VllmEngine
    from autotune.space.candidates import enumerate_candidates, load_space

    engine = VllmEngine()
    p = parser()
    bad = 0
    for name in spaces:
        space = load_space(name)
        model = space.model.model_copy(update={"path": space.model.path or "/models/placeholder"})
        for candidate in enumerate_candidates(space):
            argv = engine.render(candidate, model, 8000).server.argv
            serve_args = argv[argv.index("serve") + 1 :]
            try:
                args = p.parse_args(serve_args)
                ok = f"ok ({args.kv_cache_dtype}, {getattr(args, 'attention_backend', None)})"
            except SystemExit:
                bad += 1
                ok = "REJECTED"
            print(f"{name}: {candidate.label()}: {ok}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["vllm-gemma3-270m"]))
