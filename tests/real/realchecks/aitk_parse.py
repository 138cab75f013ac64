"""Load rendered ai-toolkit job files the way ai-toolkit loads them (run in a Python with torch and
oyaml).

Usage: python aitk_parse.py SRC ROWS.json -> prints one JSON list, per row ``seen``.
Executed from the checkout (ostris/ai-toolkit @ 27a03a9): ``toolkit/config.py:get_config`` (what
run.py -> toolkit/job.py:get_job calls) and the config classes of ``toolkit/config_modules.py``
built as jobs/process/BaseSDTrainProcess.py:107-166 builds them (``model_config['dtype'] =
train_config.dtype`` included). The module-level imports those classes never use (torchaudio,
torchao's ``_DTYPE_TO_BIT_WIDTH``, toolkit.audio.album_artwork, toolkit.prompt_utils: used by
GenerateImageConfig only) are stubbed. Follows shared/real-trainers/parser-checks/aitk_parse.py."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path


def main(src: str, rows_path: str) -> None:
    sys.path.insert(0, src)
    for name in ("torchaudio", "torchao", "torchao.quantization", "toolkit.audio", "toolkit.audio.album_artwork",
                 "toolkit.prompt_utils"):  # fmt: skip
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["torchao.quantization.quant_primitives"] = types.SimpleNamespace(_DTYPE_TO_BIT_WIDTH={})  # type: ignore[assignment]
    sys.modules["toolkit.audio.album_artwork"].add_album_artwork = lambda *a, **k: None  # type: ignore[attr-defined]
    sys.modules["toolkit.prompt_utils"].PromptEmbeds = object  # type: ignore[attr-defined]

    from toolkit.config import get_config
    from toolkit.config_modules import (
        DatasetConfig,
        ModelConfig,
        SaveConfig,
        TrainConfig,
        preprocess_dataset_raw_config,
    )

    out = []
    for row in json.loads(Path(rows_path).read_text()):
        config = get_config(row["config"], None)
        process = config["config"]["process"][0]
        train = TrainConfig(**process.get("train", {}))
        model_raw = dict(process.get("model", {}))
        model_raw["dtype"] = train.dtype  # BaseSDTrainProcess.py:116
        model = ModelConfig(**model_raw)
        save = SaveConfig(**process.get("save", {}))
        datasets = [DatasetConfig(**d) for d in preprocess_dataset_raw_config(process.get("datasets", []))]
        seen = {
            "job": config["job"],
            "quantize": model.quantize,
            "qtype": model.qtype if model.quantize else "none",
            "layer_offloading": bool(model.layer_offloading),
            "layer_offloading_transformer_percent": model.layer_offloading_transformer_percent,
            "low_vram": model.low_vram,
            "gradient_checkpointing": train.gradient_checkpointing,
            "optimizer": train.optimizer.lower(),
            "batch_size": train.batch_size,
            "gradient_accumulation": train.gradient_accumulation,
            "steps": train.steps,
            "disable_sampling": train.disable_sampling,
            "save_every": save.save_every,
            "datasets": len(datasets),
            "training_folder": process["training_folder"],
        }
        out.append({"seen": seen})
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
