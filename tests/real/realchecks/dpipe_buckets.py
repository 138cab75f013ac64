"""Run diffusion-pipe's own bucketing and drop code on rows of clips (needs only numpy).

Usage: python dpipe_buckets.py SRC ROWS.json -> prints one JSON list, one answer per row.
From the checkout (tdrussell/diffusion-pipe @ 8f83dbf), taken with ``ast`` (utils/dataset.py imports
torch, datasets and deepspeed): ``DirectoryDataset._find_closest_ar_bucket`` (838-852) and
``_find_closest_size_bucket`` (854-872), ``ConcatenatedBatchedDataset._make_divisible_by``
(392-396), ``dedup_and_sort`` (74-78), bound to stand-in objects holding the attributes
``DirectoryDataset.__init__`` sets (lines 462-513, which are too entangled to run: they read the
folder). Rows: ``{"kind": "ar", "frames", "width", "height", "frame_buckets", "ars"}`` (or ``min_ar``, ``max_ar``,
``num`` for line 505's ``geomspace``),
``{"kind": "size", "frames", "width", "height", "size_buckets"}`` or ``{"kind": "drop", "n", "batch"}``."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np


def _method(tree: ast.Module, cls: str, name: str, ns: dict[str, Any]) -> Any:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    exec(compile(ast.Module(body=[item], type_ignores=[]), "dataset.py", "exec"), ns)
                    return ns[name]
    raise KeyError(f"{cls}.{name}")


def _function(tree: ast.Module, name: str, ns: dict[str, Any]) -> Any:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            exec(compile(ast.Module(body=[node], type_ignores=[]), "dataset.py", "exec"), ns)
            return ns[name]
    raise KeyError(name)


def main(src: str, rows_path: str) -> None:
    tree = ast.parse((Path(src) / "utils" / "dataset.py").read_text())
    ns: dict[str, Any] = {
        "np": np,
        "ROUND_DECIMAL_DIGITS": 3,
        "is_main_process": lambda: True,
        "logger": SimpleNamespace(warning=lambda *_: None),
    }
    ar_bucket = _method(tree, "DirectoryDataset", "_find_closest_ar_bucket", ns)
    size_bucket = _method(tree, "DirectoryDataset", "_find_closest_size_bucket", ns)
    divisible = _method(tree, "ConcatenatedBatchedDataset", "_make_divisible_by", ns)
    dedup_and_sort = _function(tree, "dedup_and_sort", ns)
    out: list[Any] = []
    for row in json.loads(Path(rows_path).read_text()):
        frames, is_video = row.get("frames", 1), row.get("frames", 1) > 1
        if row["kind"] == "ar":
            buckets = sorted({*row["frame_buckets"], 1})  # lines 508-513
            given = row["ars"] if "ars" in row else np.geomspace(row["min_ar"], row["max_ar"], num=row["num"])
            ars = dedup_and_sort(given)
            me = SimpleNamespace(frame_buckets=np.array(buckets), ars=ars, log_ars=np.log(ars))
            got = ar_bucket(me, np.log(row["width"] / row["height"]), frames, is_video)
            out.append(None if got is None else [round(float(got[0]), 3), int(got[1])])
        elif row["kind"] == "size":
            sizes = sorted(row["size_buckets"], key=lambda t: t[-1], reverse=True)  # line 464
            sizes_np = np.array(sizes)
            ars = dedup_and_sort(np.array([w / h for w, h, _ in sizes]))  # lines 494-507, after line 464
            me = SimpleNamespace(size_buckets=sizes_np, log_ars=np.log(ars))
            got = size_bucket(me, np.log(row["width"] / row["height"]), frames, is_video)
            out.append(None if got is None else [int(v) for v in got])
        else:
            me = SimpleNamespace(
                iteration_order=np.arange(row["n"]), datasets=[SimpleNamespace(size_bucket=(1, 1, 1))]
            )
            divisible(me, row["batch"])
            out.append(len(me.iteration_order))
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
