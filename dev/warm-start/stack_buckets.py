"""Where a stretch of a process's wall-clock time went, from its STACK_SAMPLES file
(``infra/bench/autotune_trace/sitecustomize.py``): each sample counts until the next, and goes
to the first bucket whose frame pattern its stack contains.

    python dev/warm-start/stack_buckets.py PREFIX.<pid>.json FROM_S TO_S
"""

import collections
import json
import sys

BUCKETS = [  # first match wins
    ("loading cached AOTAutograd/Inductor graphs", "autograd_cache.py:try_load"),
    ("guards", "guards.py"),
    ("first run of a compiled graph (CUDA graph warm-up)", "cudagraph_trees.py:run_eager"),
    ("CUDA graph recording", "cudagraph_trees.py:record"),
    ("backward (the autograd engine's threads)", "network.py:backward"),
    ("Dynamo tracing", "symbolic_convert.py"),
    ("Dynamo, other", "convert_frame.py"),
    ("imports", "_find_and_load"),
    ("optimizer step", "network.py:step"),
]


def main(path: str, start: float, end: float) -> None:
    with open(path) as file:
        data = json.load(file)
    stacks = data["stacks"]
    samples = [s for s in data["samples"] if s[1] < len(stacks)]
    spent = collections.Counter()
    for (t, index), (following, _) in zip(samples, samples[1:], strict=False):
        if start <= t < end:
            joined = "|".join(stacks[index])
            name = next((n for n, pattern in BUCKETS if pattern in joined), "other")
            spent[name] += following - t
    for name, seconds in spent.most_common():
        print(f"{seconds:6.2f} s  {name}")
    print(f"{sum(spent.values()):6.2f} s  in all")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
