"""The LTX-2 trainer (Lightricks/LTX-2 ``packages/ltx-trainer``): its adapter, checkout, data, latents, short-run recipe and trial data view."""
