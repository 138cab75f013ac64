"""Readers of what trainers print or write (never raising on a truncated file): ``ltx2log`` (the
LTX-2 trainer's Step lines and statistics block), ``hookfile`` (the trial-side hook's JSON lines),
``metricsfile`` (``AUTOTUNE_METRICS_FILE``), and the printed formats ``chain`` tries in order:
``hftrainer`` (Hugging Face ``Trainer``'s log dicts), ``iterlog`` (``iter N: loss X, time Yms``),
``msbatch`` (pytorch/examples' ``| ms/batch N |`` lines), ``tqdmbar`` (the training tqdm bar; Lightning's ``Epoch N`` bar)."""
