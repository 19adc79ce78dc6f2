"""Run Hearth's benchmarks: `python -m bench [name ...]` (or `./dev bench`).

Each benchmark is a module `bench/<name>.py` runnable on its own as `python -m bench.<name>`; here
each runs in its own process so that one's memory (peak RSS) and warm caches do not colour another's.
"""

import subprocess
import sys
from pathlib import Path

ORDER = ["load", "tokenizer", "cpu", "prefix", "first_restore", "warm_chat", "gpu", "app_responsive", "warm_chat_stall"]


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = argv or [n for n in ORDER if (here / f"{n}.py").exists()]
    failed = []
    for name in names:
        print(f"\n## bench.{name}\n", flush=True)
        if subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=here.parent).returncode:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
